#include "experiments/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace heaplab::experiments {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

namespace {

// Number of ways to get each U in 0..m*n for samples of sizes m and n
// without ties (the classic recurrence over the largest element), as
// probabilities (m, n up to 30: at most 31 x 31 tables of 901 values).
std::vector<double> exact_u_distribution(size_t m, size_t n) {
  // f[i][j][u]: counts for sizes i, j; built up with rolling tables.
  std::vector<std::vector<std::vector<double>>> f(m + 1, std::vector<std::vector<double>>(n + 1));
  for (size_t i = 0; i <= m; ++i) {
    for (size_t j = 0; j <= n; ++j) {
      f[i][j].assign(i * j + 1, 0.0);
      if (i == 0 || j == 0) {
        f[i][j][0] = 1;
        continue;
      }
      // The largest of all i + j values is from the first sample (it beats
      // all j of the second) or from the second (it beats none).
      for (size_t u = 0; u <= i * j; ++u) {
        double c = 0;
        if (u >= j) c += f[i - 1][j][u - j];
        if (u <= (i) * (j - 1)) c += f[i][j - 1][u];
        f[i][j][u] = c;
      }
    }
  }
  std::vector<double> d = f[m][n];
  double total = 0;
  for (double c : d) total += c;
  for (double& c : d) c /= total;
  return d;
}

}  // namespace

MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  MannWhitney r;
  const size_t m = a.size(), n = b.size();
  if (m == 0 || n == 0) return r;
  bool ties = false;
  for (double x : a)
    for (double y : b) {
      if (x > y)
        r.u += 1;
      else if (x == y) {
        r.u += 0.5;
        ties = true;
      }
    }
  // Ties within the pooled sample matter for the variance too.
  std::vector<double> all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  double tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    const double t = double(j - i);
    if (t > 1) {
      tie_term += t * t * t - t;
      ties = true;
    }
    i = j;
  }
  const double mu = double(m) * double(n) / 2;
  if (!ties && m <= 30 && n <= 30) {
    const std::vector<double> d = exact_u_distribution(m, n);
    // Two-sided: twice the smaller tail, at most 1.
    const size_t u = size_t(r.u);
    double lower = 0, upper = 0;
    for (size_t k = 0; k <= u; ++k) lower += d[k];
    for (size_t k = u; k < d.size(); ++k) upper += d[k];
    r.p = std::min(1.0, 2 * std::min(lower, upper));
    r.exact = true;
    return r;
  }
  const double N = double(m + n);
  const double var = double(m) * double(n) / 12 * ((N + 1) - tie_term / (N * (N - 1)));
  if (var <= 0) return r;  // every value the same: no difference
  // Continuity correction of 1/2 towards the mean.
  const double z = (std::fabs(r.u - mu) - 0.5) / std::sqrt(var);
  r.p = std::min(1.0, std::erfc(std::max(z, 0.0) / std::sqrt(2.0)));
  return r;
}

}  // namespace heaplab::experiments
