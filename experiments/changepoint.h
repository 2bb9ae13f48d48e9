// Change points in a metric's history: E-divisive means (Matteson and
// James, "A Nonparametric Approach for Multiple Change Point Analysis of
// Multivariate Data", JASA 2014), the method MongoDB's and Apache Otava's
// performance-regression detectors grew from.
//
// Of a series x, the divergence of a split of the segment [a, b) at t into
// X = x[a, t) and Y = x[t, b) (m and k points) is
//   Q = m k / (m + k) * ( 2/(m k) sum |X_i - Y_j|^e
//                         - 1/C(m,2) sum_{i<l} |X_i - X_l|^e
//                         - 1/C(k,2) sum_{j<l} |Y_j - Y_l|^e )
// (e = 1: differences in location, any distribution). The split with the
// largest Q over every segment is a candidate; it is kept if a permutation
// test finds it significant: the points are shuffled within each segment
// R times, and p = (1 + the shuffles whose largest Q is at least the
// candidate's) / (1 + R). Kept splits divide their segment and the search
// goes on; it stops at the first candidate that is not significant. Every
// segment keeps at least `min_size` points. The shuffles are drawn from a
// fixed seed: the same series always gives the same change points.
//
// The search is over t and over the end of Y (Y = x[t, k), k <= b), as
// Matteson and James search it, so that a short excursion between two alike
// stretches is found too. With running sums of the distances every block
// sum is four lookups: O(n^2) per ordering of the points for n points, so a
// history of a hundred sessions is judged with 199 shuffles in milliseconds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace heaplab::experiments {

struct ChangePointOptions {
  size_t min_size = 4;         // points in every segment
  double exponent = 1;         // e, in (0, 2)
  size_t permutations = 199;   // R
  double significance = 0.01;  // a split is kept when p <= this
  uint64_t seed = 0x9e3779b97f4a7c15ULL;
};

struct ChangePoint {
  size_t index = 0;              // the first point after the change
  double q = 0;                  // its divergence
  double p = 1;                  // permutation p-value
  double before = 0, after = 0;  // medians of the segments either side (between neighbouring change points)
};

// The change points of `x`, in order of position; empty for a series too
// short to split (fewer than 2 * min_size points).
std::vector<ChangePoint> e_divisive(const std::vector<double>& x, const ChangePointOptions& opt = {});

}  // namespace heaplab::experiments
