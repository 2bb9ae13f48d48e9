// Change point detection (E-divisive means) on series with known steps.
#include "experiments/changepoint.h"

#include <gtest/gtest.h>

#include <random>

#include "experiments/changepoint_synth.h"

namespace heaplab::experiments {
namespace {

TEST(ChangePoint, OneClearStep) {
  std::vector<double> x;
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0, 1);
  for (int i = 0; i < 30; ++i) x.push_back((i < 18 ? 100 : 110) + noise(rng));
  const auto c = e_divisive(x);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].index, 18u);
  EXPECT_NEAR(c[0].before, 100, 1);
  EXPECT_NEAR(c[0].after, 110, 1);
  EXPECT_LE(c[0].p, 0.01);
}

// The expectations of MongoDB's E-divisive implementation's own tests
// (mongodb/signal-processing-algorithms, tests/test_e_divisive.py and
// test_detection.py): a step from 0 to 1 at cp of 2 cp points is found at
// exactly cp; 50 then 100 from the 16th of 30 points, at 15. Below 7 + 7
// points no shuffle test can reach p <= 0.01 (of the C(2cp, cp) orders two
// split as well as the series: 2/924 for cp = 6), so there at 0.05, as
// MongoDB's test runs.
TEST(ChangePoint, MongoDbsExpectations) {
  for (size_t cp = 5; cp < 100; cp += cp < 7 ? 1 : 7) {
    std::vector<double> x(cp, 0.0);
    x.resize(2 * cp, 1.0);
    ChangePointOptions o;
    if (cp < 7) o.significance = 0.05;
    const auto c = e_divisive(x, o);
    ASSERT_EQ(c.size(), 1u) << cp;
    EXPECT_EQ(c[0].index, cp);
  }
  std::vector<double> x(15, 50.0);
  x.resize(30, 100.0);
  const auto c = e_divisive(x);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].index, 15u);
}

TEST(ChangePoint, NothingInAFlatOrShortSeries) {
  EXPECT_TRUE(e_divisive(std::vector<double>(40, 5.0)).empty());
  EXPECT_TRUE(e_divisive({1, 1, 1, 9, 9, 9}).empty());  // shorter than 2 x min_size
  EXPECT_TRUE(e_divisive({}).empty());
  std::vector<double> holed(30, 1.0);
  holed[20] = std::nan("");
  EXPECT_TRUE(e_divisive(holed).empty());
}

TEST(ChangePoint, TwoStepsAndTheSegmentsBetween) {
  std::vector<double> x;
  for (int i = 0; i < 36; ++i) x.push_back(i < 12 ? 10 : i < 24 ? 20 : 15);
  x[3] += 0.5;  // not quite flat
  const auto c = e_divisive(x);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].index, 12u);
  EXPECT_EQ(c[1].index, 24u);
  EXPECT_DOUBLE_EQ(c[0].before, 10);
  EXPECT_DOUBLE_EQ(c[0].after, 20);
  EXPECT_DOUBLE_EQ(c[1].before, 20);
  EXPECT_DOUBLE_EQ(c[1].after, 15);
}

TEST(ChangePoint, SameSeriesSameAnswer) {
  std::mt19937_64 rng(7);
  const synth::History h = synth::history(rng, 60, 2, 2, false);
  const auto a = e_divisive(h.x), b = e_divisive(h.x);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index);
    EXPECT_EQ(a[i].p, b[i].p);
  }
}

// The detection rates BENCHMARKS.md reports, as floors: 100 histories of
// 60 points with 1-3 steps of 3 noise sigmas (Gaussian noise), and 100
// steady ones.
TEST(ChangePoint, RatesOnSyntheticHistories) {
  std::mt19937_64 rng(20261125);
  synth::Score s;
  for (size_t i = 0; i < 100; ++i) {
    const synth::History h = synth::history(rng, 60, 1 + i % 3, 3, false);
    synth::score(h, e_divisive(h.x), 2, s);
  }
  EXPECT_GE(s.precision(), 0.95);
  EXPECT_GE(s.recall(), 0.90);
  size_t alarms = 0;
  for (size_t i = 0; i < 100; ++i) alarms += e_divisive(synth::history(rng, 60, 0, 0, false).x).size();
  EXPECT_LE(alarms, 5u);
}

}  // namespace
}  // namespace heaplab::experiments
