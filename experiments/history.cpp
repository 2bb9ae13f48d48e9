#include "experiments/history.h"

#include <algorithm>
#include <cmath>

#include "experiments/stats.h"

namespace heaplab::experiments {

Verdict judge(const std::vector<SessionStat>& h, bool lower_is_better, size_t min_history, double min_relative_band) {
  Verdict v;
  if (h.empty()) return v;
  v.newest = h.back().median;
  if (h.size() < min_history + 1) return v;
  std::vector<double> medians, spreads;
  for (size_t i = 0; i + 1 < h.size(); ++i) {
    medians.push_back(h[i].median);
    spreads.push_back((h[i].max - h[i].min) / 2);
  }
  v.centre = median(medians);
  std::vector<double> dev;
  dev.reserve(medians.size());
  for (double m : medians) dev.push_back(std::fabs(m - v.centre));
  const double mad = 1.4826 * median(dev);
  const double half = std::max({3 * mad, 2 * median(spreads), min_relative_band * std::fabs(v.centre)});
  v.low = v.centre - half;
  v.high = v.centre + half;
  v.change = v.centre != 0 ? v.newest / v.centre - 1 : 0;
  const bool above = v.newest > v.high, below = v.newest < v.low;
  v.state = !(above || below) ? "steady" : (above == lower_is_better) ? "regression" : "improvement";
  return v;
}

}  // namespace heaplab::experiments
