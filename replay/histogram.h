// A log-linear histogram of non-negative 64-bit values (latencies in
// nanoseconds or ticks): values below 2^kSubBits are counted exactly; above,
// each power of two [2^k, 2^(k+1)) is split into 2^kSubBits equal
// sub-buckets, so a bucket's width is at most 1/2^kSubBits (3.1%) of its
// values. Fixed size, no allocation, so one can live in a replay thread's
// mmap'd result block; adding is a few instructions; histograms merge by
// adding counts. Percentiles name a bucket: its [low, high] range.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace heaplab::replay {

class LogLinearHistogram {
 public:
  static constexpr unsigned kSubBits = 5;
  static constexpr uint64_t kSub = uint64_t{1} << kSubBits;  // 32
  // Exact buckets for 0..kSub-1, then kSub per power of two from 2^kSubBits
  // up to 2^63: (64 - kSubBits) groups.
  static constexpr unsigned kBuckets = unsigned(kSub + (64 - kSubBits) * kSub);

  static unsigned bucket_of(uint64_t v) {
    if (v < kSub) return unsigned(v);
    const unsigned msb = 63u - unsigned(__builtin_clzll(v));    // >= kSubBits
    const unsigned group = msb - kSubBits;                      // 0 for [32, 64)
    const uint64_t sub = (v >> (msb - kSubBits)) & (kSub - 1);  // the next kSubBits bits
    return unsigned(kSub + group * kSub + sub);
  }
  // The smallest and largest values of bucket b.
  static uint64_t bucket_low(unsigned b) {
    if (b < kSub) return b;
    const unsigned group = (b - unsigned(kSub)) / unsigned(kSub);
    const uint64_t sub = (b - kSub) % kSub;
    const unsigned msb = group + kSubBits;
    return (uint64_t{1} << msb) | (sub << (msb - kSubBits));
  }
  static uint64_t bucket_high(unsigned b) {
    if (b < kSub) return b;
    const unsigned group = (b - unsigned(kSub)) / unsigned(kSub);
    const unsigned msb = group + kSubBits;
    return bucket_low(b) + ((uint64_t{1} << (msb - kSubBits)) - 1);
  }

  void add(uint64_t v) {
    ++counts_[bucket_of(v)];
    ++count_;
    sum_ += v;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
  }
  void merge(const LogLinearHistogram& o) {
    for (unsigned b = 0; b < kBuckets; ++b) counts_[b] += o.counts_[b];
    count_ += o.count_;
    sum_ += o.sum_;
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
  }

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? double(sum_) / double(count_) : 0.0; }
  uint64_t bucket_count(unsigned b) const { return counts_[b]; }

  struct Range {
    uint64_t low = 0, high = 0;
  };
  // The bucket holding the sample of rank ceil(q * count) (1-based; q in
  // (0, 1]), i.e. the value below or at which a fraction q of the samples
  // lie, to within the bucket; high is clamped to the largest sample.
  Range quantile(double q) const {
    if (count_ == 0) return {};
    double want = q * double(count_);
    uint64_t rank = uint64_t(want);
    if (double(rank) < want) ++rank;
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (unsigned b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) return {std::max(bucket_low(b), min()), std::min(bucket_high(b), max_)};
    }
    return {max_, max_};
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;  // 2^64 ns is 584 years of latency: no overflow in practice
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

}  // namespace heaplab::replay
