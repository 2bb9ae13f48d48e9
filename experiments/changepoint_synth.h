// Synthetic metric histories with known steps, for the change point
// detector's test and its precision/recall benchmark: a level with
// Gaussian noise (or heavy-tailed: Student t with 3 degrees of freedom,
// scaled to the same standard deviation), steps of a given size in noise
// standard deviations, up or down, at random places at least `min_gap`
// points apart and from both ends.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "experiments/changepoint.h"

namespace heaplab::experiments::synth {

struct History {
  std::vector<double> x;
  std::vector<size_t> steps;  // the first point after each step
};

inline History history(std::mt19937_64& rng, size_t n, size_t steps, double step_sigmas, bool heavy_tails,
                       size_t min_gap = 8) {
  History h;
  // Step positions: drawn until they are min_gap apart and from the ends.
  std::uniform_int_distribution<size_t> pos(min_gap, n - min_gap);
  for (int tries = 0; h.steps.size() < steps && tries < 10000; ++tries) {
    const size_t p = pos(rng);
    bool ok = true;
    for (size_t s : h.steps) ok = ok && (p > s ? p - s : s - p) >= min_gap;
    if (ok) h.steps.push_back(p);
  }
  std::sort(h.steps.begin(), h.steps.end());
  std::normal_distribution<double> gauss(0, 1);
  std::student_t_distribution<double> t3(3);
  std::bernoulli_distribution up(0.5);
  const double sigma = 1;  // 1% of the level
  double level = 100;
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    if (next < h.steps.size() && i == h.steps[next]) {
      level += (up(rng) ? 1 : -1) * step_sigmas * sigma;
      ++next;
    }
    // t with 3 degrees of freedom has variance 3: scaled to 1.
    const double e = heavy_tails ? t3(rng) / std::sqrt(3.0) : gauss(rng);
    h.x.push_back(level + sigma * e);
  }
  return h;
}

struct Score {
  size_t true_steps = 0, found = 0, matched = 0;
  double precision() const { return found ? double(matched) / double(found) : 1; }
  double recall() const { return true_steps ? double(matched) / double(true_steps) : 1; }
  double f1() const {
    const double p = precision(), r = recall();
    return p + r > 0 ? 2 * p * r / (p + r) : 0;
  }
};

// Each true step matches at most one change point within `margin` points.
inline void score(const History& h, const std::vector<ChangePoint>& found, size_t margin, Score& s) {
  s.true_steps += h.steps.size();
  s.found += found.size();
  std::vector<bool> used(found.size(), false);
  for (size_t t : h.steps) {
    size_t best = SIZE_MAX, dist = SIZE_MAX;
    for (size_t i = 0; i < found.size(); ++i) {
      const size_t d = found[i].index > t ? found[i].index - t : t - found[i].index;
      if (!used[i] && d <= margin && d < dist) {
        best = i;
        dist = d;
      }
    }
    if (best != SIZE_MAX) {
      used[best] = true;
      ++s.matched;
    }
  }
}

}  // namespace heaplab::experiments::synth
