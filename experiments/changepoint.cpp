#include "experiments/changepoint.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "experiments/stats.h"

namespace heaplab::experiments {

namespace {

struct Split {
  size_t at = 0;
  double q = -1;  // < 0: the segment cannot be split
};

// Distances of the points, and their running sums in one order of the
// points (shuffled by the permutation test), so that the sum over any
// block of pairs is four lookups.
class Searcher {
 public:
  Searcher(const std::vector<double>& x, double exponent) : n_(x.size()), d_(n_ * n_), sum_((n_ + 1) * (n_ + 1)) {
    for (size_t i = 0; i < n_; ++i)
      for (size_t j = 0; j < n_; ++j) d_[i * n_ + j] = std::pow(std::fabs(x[i] - x[j]), exponent);
  }

  // sum_[i][j]: the distances of points [0, i) of the order to points [0, j).
  void order(const std::vector<size_t>& idx) {
    const size_t w = n_ + 1;
    for (size_t i = 0; i < n_; ++i) {
      double row = 0;
      for (size_t j = 0; j < n_; ++j) {
        row += d_[idx[i] * n_ + idx[j]];
        sum_[(i + 1) * w + j + 1] = sum_[i * w + j + 1] + row;
      }
    }
  }

  // The best split of [a, b): over t, and over the end k of Y = [t, k)
  // (Matteson and James: a short segment between two alike ones is found
  // too), with X = [a, t).
  Split best(size_t a, size_t b, size_t min_size) const {
    Split s;
    if (b - a < 2 * min_size) return s;
    for (size_t t = a + min_size; t + min_size <= b; ++t) {
      const double m = double(t - a);
      const double wx = block(a, t, a, t) / 2;
      for (size_t k = t + min_size; k <= b; ++k) {
        const double l = double(k - t);
        const double e =
            2 * block(a, t, t, k) / (m * l) - wx / (m * (m - 1) / 2) - block(t, k, t, k) / 2 / (l * (l - 1) / 2);
        const double q = m * l / (m + l) * e;
        if (q > s.q) {
          s.q = q;
          s.at = t;
        }
      }
    }
    return s;
  }

 private:
  double block(size_t r0, size_t r1, size_t c0, size_t c1) const {
    const size_t w = n_ + 1;
    return sum_[r1 * w + c1] - sum_[r0 * w + c1] - sum_[r1 * w + c0] + sum_[r0 * w + c0];
  }

  size_t n_;
  std::vector<double> d_, sum_;
};

}  // namespace

std::vector<ChangePoint> e_divisive(const std::vector<double>& x, const ChangePointOptions& opt) {
  std::vector<ChangePoint> out;
  const size_t n = x.size();
  const size_t min_size = std::max<size_t>(opt.min_size, 2);
  if (n < 2 * min_size) return out;
  for (double v : x)
    if (!std::isfinite(v)) return out;  // a history with a hole in it is not judged
  Searcher search(x, opt.exponent);
  std::vector<size_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<size_t> bounds = {0, n};  // segment boundaries, sorted
  std::mt19937_64 rng(opt.seed);
  for (;;) {
    // The candidate: the best split of any segment.
    Split cand;
    search.order(identity);
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
      const Split sp = search.best(bounds[s], bounds[s + 1], min_size);
      if (sp.q > cand.q) cand = sp;
    }
    if (cand.q <= 0) break;
    // The permutation test: shuffled within each segment, as often as asked.
    size_t as_large = 0;
    std::vector<size_t> idx = identity;
    for (size_t r = 0; r < opt.permutations; ++r) {
      for (size_t s = 0; s + 1 < bounds.size(); ++s)
        std::shuffle(idx.begin() + std::ptrdiff_t(bounds[s]), idx.begin() + std::ptrdiff_t(bounds[s + 1]), rng);
      search.order(idx);
      double qmax = -1;
      for (size_t s = 0; s + 1 < bounds.size(); ++s)
        qmax = std::max(qmax, search.best(bounds[s], bounds[s + 1], min_size).q);
      as_large += qmax >= cand.q;
    }
    const double p = double(1 + as_large) / double(1 + opt.permutations);
    if (p > opt.significance) break;
    out.push_back({cand.at, cand.q, p, 0, 0});
    bounds.insert(std::upper_bound(bounds.begin(), bounds.end(), cand.at), cand.at);
  }
  std::sort(out.begin(), out.end(), [](const ChangePoint& a, const ChangePoint& b) { return a.index < b.index; });
  for (ChangePoint& c : out) {
    const auto at = std::lower_bound(bounds.begin(), bounds.end(), c.index);
    const size_t from = *(at - 1), to = *(at + 1);
    c.before = median(std::vector<double>(x.begin() + std::ptrdiff_t(from), x.begin() + std::ptrdiff_t(c.index)));
    c.after = median(std::vector<double>(x.begin() + std::ptrdiff_t(c.index), x.begin() + std::ptrdiff_t(to)));
  }
  return out;
}

}  // namespace heaplab::experiments
