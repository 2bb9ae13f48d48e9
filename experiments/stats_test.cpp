// Order statistics and the Mann-Whitney U test against answers worked out
// by hand (and matching R's wilcox.test and scipy's mannwhitneyu).
#include "experiments/stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace heaplab::experiments {
namespace {

TEST(Stats, Quantiles) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4, 5}, 0.25), 2);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4}, 0.25), 1.75);  // type 7: 1 + 0.75 * (2 - 1)
  EXPECT_DOUBLE_EQ(quantile({7}, 0.9), 7);
  EXPECT_TRUE(std::isnan(median({})));
}

// Without ties, the exact distribution: all of one sample below all of the
// other has probability 1/C(m+n, m) per side.
TEST(Stats, MannWhitneyExact) {
  MannWhitney r = mann_whitney({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 0);
  EXPECT_NEAR(r.p, 2.0 / 20, 1e-12);  // C(6,3) = 20
  r = mann_whitney({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(r.u, 25);
  EXPECT_NEAR(r.p, 2.0 / 252, 1e-12);  // C(10,5) = 252
  // R: wilcox.test(c(1.1, 2.2, 3.3, 4.4), c(5.5, 6.6, 7.7))$p.value = 0.05714
  EXPECT_NEAR(mann_whitney({1.1, 2.2, 3.3, 4.4}, {5.5, 6.6, 7.7}).p, 2.0 / 35, 1e-12);
  // Interleaved: U = 3 of 9 -> P(U <= 3) = 7/20 for m = n = 3; two-sided 0.7.
  r = mann_whitney({1, 3, 5}, {2, 4, 6});
  EXPECT_DOUBLE_EQ(r.u, 3);
  EXPECT_NEAR(r.p, 0.7, 1e-12);
  // Identical distributions by symmetry: the middle U has p = 1.
  EXPECT_NEAR(mann_whitney({1, 4}, {2, 3}).p, 1.0, 1e-12);
}

// With ties, the normal approximation with the tie correction and a
// continuity correction (scipy.stats.mannwhitneyu(..., method="asymptotic")).
TEST(Stats, MannWhitneyTies) {
  const MannWhitney r = mann_whitney({1, 2, 2, 3, 4}, {2, 4, 5, 6, 6});
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 3.5);  // 3>2, 4>2, and ties 2=2 (twice) and 4=4 at 1/2
  // mu = 12.5; ties: {2,2,2} t=3, {4,4} t=2, {6,6} t=2: sum(t^3 - t) = 24 + 6 + 6 = 36;
  // var = 25/12 * (11 - 36/90) = 22.0833...; z = (9 - 0.5)/sqrt(var) = 1.80878
  EXPECT_NEAR(r.p, std::erfc(8.5 / std::sqrt(25.0 / 12 * (11 - 36.0 / 90)) / std::sqrt(2.0)), 1e-12);
  EXPECT_NEAR(r.p, 0.07049, 1e-5);
  // Everything equal: no evidence at all.
  EXPECT_DOUBLE_EQ(mann_whitney({5, 5, 5}, {5, 5}).p, 1.0);
  EXPECT_DOUBLE_EQ(mann_whitney({}, {1, 2}).p, 1.0);
}

}  // namespace
}  // namespace heaplab::experiments
