// The latency histogram: bucket boundaries, merging and percentiles against
// sets of samples whose answers are known.
#include "replay/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace heaplab::replay {
namespace {

using H = LogLinearHistogram;

// Every value falls in the bucket whose range holds it; buckets tile the
// 64-bit range without gaps; each is at most 1/32 of its values wide.
TEST(Histogram, BucketsTileTheRange) {
  EXPECT_EQ(H::bucket_low(0), 0u);
  for (unsigned b = 0; b + 1 < H::kBuckets; ++b) {
    ASSERT_EQ(H::bucket_high(b) + 1, H::bucket_low(b + 1)) << b;
    ASSERT_EQ(H::bucket_of(H::bucket_low(b)), b);
    ASSERT_EQ(H::bucket_of(H::bucket_high(b)), b);
    if (H::bucket_low(b) >= 32) {
      ASSERT_LE(H::bucket_high(b) - H::bucket_low(b) + 1, H::bucket_low(b) / 32) << b;
    }
  }
  EXPECT_EQ(H::bucket_high(H::kBuckets - 1), UINT64_MAX);
  EXPECT_EQ(H::bucket_of(UINT64_MAX), H::kBuckets - 1);
  // Exact below 32; then 32 buckets per power of two.
  EXPECT_EQ(H::bucket_of(31), 31u);
  EXPECT_EQ(H::bucket_of(32), 32u);
  EXPECT_EQ(H::bucket_of(63), 63u);
  EXPECT_EQ(H::bucket_of(64), 64u);
  EXPECT_EQ(H::bucket_of(65), 64u);  // [64, 65]
  EXPECT_EQ(H::bucket_low(64), 64u);
  EXPECT_EQ(H::bucket_high(64), 65u);
  EXPECT_EQ(H::bucket_of(1000), H::bucket_of(1007));  // [992, 1007]
  EXPECT_EQ(H::bucket_low(H::bucket_of(1000)), 992u);
  EXPECT_EQ(H::bucket_high(H::bucket_of(1000)), 1007u);
}

// Samples 1..1000: the p-quantile is the bucket of sample ceil(p*1000).
TEST(Histogram, QuantilesOfAKnownSet) {
  H h;
  for (uint64_t v = 1; v <= 1000; ++v) h.add(v);
  EXPECT_EQ(h.count(), 1000u);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.max(), 1000u);
  EXPECT_DOUBLE_EQ(h.mean(), 500.5);
  struct Want {
    double q;
    uint64_t low, high;
  };
  // rank 500 -> bucket [496, 503]; 900 -> [896, 911]; 990 -> [976, 991];
  // 999 -> [992, 1007] clamped to the maximum 1000; 1000 -> same.
  for (const Want& w : {Want{0.5, 496, 503}, Want{0.9, 896, 911}, Want{0.99, 976, 991}, Want{0.999, 992, 1000},
                        Want{0.9999, 992, 1000}, Want{1.0, 992, 1000}}) {
    const auto r = h.quantile(w.q);
    EXPECT_EQ(r.low, w.low) << w.q;
    EXPECT_EQ(r.high, w.high) << w.q;
  }
  // Small values are exact.
  H s;
  for (uint64_t v : {3, 1, 4, 1, 5, 9, 2, 6, 5, 3}) s.add(v);  // sorted: 1 1 2 3 3 4 5 5 6 9
  EXPECT_EQ(s.quantile(0.5).low, 3u);                          // rank 5
  EXPECT_EQ(s.quantile(0.5).high, 3u);
  EXPECT_EQ(s.quantile(0.9).low, 6u);   // rank 9
  EXPECT_EQ(s.quantile(0.95).low, 9u);  // rank 10
  EXPECT_EQ(s.quantile(0.1).low, 1u);   // rank 1
}

// Merging per-thread histograms gives the histogram of all samples.
TEST(Histogram, MergeEqualsTheHistogramOfTheUnion) {
  std::mt19937_64 rng(7);
  H parts[4], all;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = rng() >> (rng() % 64);
    parts[i % 4].add(v);
    all.add(v);
  }
  H merged;
  for (const H& p : parts) merged.merge(p);
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.max(), all.max());
  for (unsigned b = 0; b < H::kBuckets; ++b) ASSERT_EQ(merged.bucket_count(b), all.bucket_count(b)) << b;
  for (double q : {0.5, 0.9, 0.99, 0.999, 0.9999}) {
    EXPECT_EQ(merged.quantile(q).low, all.quantile(q).low);
    EXPECT_EQ(merged.quantile(q).high, all.quantile(q).high);
  }
  // And every quantile's range holds the true order statistic.
  std::vector<uint64_t> sorted;
  std::mt19937_64 again(7);
  for (int i = 0; i < 100000; ++i) sorted.push_back(again() >> (again() % 64));
  std::sort(sorted.begin(), sorted.end());
  for (double q : {0.5, 0.9, 0.99, 0.999, 0.9999}) {
    const uint64_t truth = sorted[size_t(std::ceil(q * 100000)) - 1];
    EXPECT_LE(all.quantile(q).low, truth);
    EXPECT_GE(all.quantile(q).high, truth);
  }
}

TEST(Histogram, EmptyHasNoQuantiles) {
  H h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.quantile(0.5).low, 0u);
  EXPECT_EQ(h.quantile(0.5).high, 0u);
  EXPECT_EQ(h.min(), 0u);
}

}  // namespace
}  // namespace heaplab::replay
