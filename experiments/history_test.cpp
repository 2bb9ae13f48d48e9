// The regression verdict on made-up histories with known answers.
#include "experiments/history.h"

#include <gtest/gtest.h>

namespace heaplab::experiments {
namespace {

std::vector<SessionStat> history(std::initializer_list<double> medians, double spread) {
  std::vector<SessionStat> h;
  for (double m : medians) h.push_back({m, m - spread, m + spread, 5});
  return h;
}

TEST(History, RegressionImprovementSteady) {
  // Medians 1.00, 1.02, 0.98, 1.01: centre 1.005, MAD 0.01 -> 3 * 1.4826 * 0.01 = 0.0445;
  // twice the within-session half-range 0.02: band 1.005 +- 0.0445.
  Verdict v = judge(history({1.00, 1.02, 0.98, 1.01, 1.20}, 0.01), true);
  EXPECT_EQ(v.state, "regression");
  EXPECT_NEAR(v.centre, 1.005, 1e-12);
  EXPECT_NEAR(v.high, 1.005 + 3 * 1.4826 * 0.01, 1e-12);
  EXPECT_NEAR(v.change, 1.20 / 1.005 - 1, 1e-12);
  EXPECT_EQ(judge(history({1.00, 1.02, 0.98, 1.01, 0.80}, 0.01), true).state, "improvement");
  EXPECT_EQ(judge(history({1.00, 1.02, 0.98, 1.01, 1.04}, 0.01), true).state, "steady");
  // Higher is better (calls per second): a fall is the regression.
  EXPECT_EQ(judge(history({100, 102, 98, 101, 80}, 1), false).state, "regression");
  EXPECT_EQ(judge(history({100, 102, 98, 101, 120}, 1), false).state, "improvement");
  // Noisy sessions widen the band: the same 1.20 is within +-2 * 0.11.
  EXPECT_EQ(judge(history({1.00, 1.02, 0.98, 1.01, 1.20}, 0.11), true).state, "steady");
  EXPECT_EQ(judge(history({1.00, 1.02, 0.98, 1.01, 1.20}, 0.09), true).state, "regression");
  // A deterministic figure: no spread at all, yet a 0.5% change is noise
  // (the band is at least 1% of the centre); 5% is not.
  EXPECT_EQ(judge(history({10, 10, 10, 10, 10.05}, 0), true).state, "steady");
  EXPECT_EQ(judge(history({10, 10, 10, 10, 10.5}, 0), true).state, "regression");
  // Too little history to say.
  EXPECT_EQ(judge(history({1.00, 1.02, 1.50}, 0.01), true).state, "short");
  EXPECT_EQ(judge({}, true).state, "short");
}

}  // namespace
}  // namespace heaplab::experiments
