// Statistics for comparing repeated measurements of two allocators: order
// statistics (median, quartiles) and the Mann-Whitney U test (two-sided),
// exact for small samples (the usual case: a handful of repetitions), by
// the normal approximation with a tie correction beyond.
#pragma once

#include <vector>

namespace heaplab::experiments {

// The q-quantile (0..1) by linear interpolation between order statistics
// (type 7, as numpy and R default); NaN for no samples.
double quantile(std::vector<double> v, double q);
inline double median(const std::vector<double>& v) { return quantile(v, 0.5); }

struct MannWhitney {
  double u = 0;        // U of the first sample: pairs (a, b) with a > b, ties counting 1/2
  double p = 1;        // two-sided p-value
  bool exact = false;  // from the exact distribution (no ties, both samples at most 30)
};

// Two-sided Mann-Whitney U test of `a` against `b`. With either sample empty,
// p = 1.
MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace heaplab::experiments
