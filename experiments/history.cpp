#include "experiments/history.h"

#include <algorithm>
#include <cmath>

#include "experiments/changepoint.h"
#include "experiments/metrics.h"
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

std::vector<Step> history_steps(const std::vector<std::string>& ids,
                                const std::vector<std::vector<RunRecord>>& sessions,
                                const std::vector<std::string>& metrics, const std::string& allocator) {
  std::vector<std::pair<std::string, std::string>> series;  // (trace, allocator), as first seen
  for (const auto& runs : sessions)
    for (const RunRecord& r : runs)
      if (!r.warmup && (allocator.empty() || r.allocator == allocator) &&
          std::find(series.begin(), series.end(), std::pair(r.trace, r.allocator)) == series.end())
        series.emplace_back(r.trace, r.allocator);
  std::vector<Step> out;
  for (const auto& [trace, alloc] : series)
    for (const std::string& name : metrics) {
      const Metric* m = find_metric(name);
      if (!m) continue;
      std::vector<double> medians;
      std::vector<size_t> at;  // the session of each median
      for (size_t i = 0; i < sessions.size(); ++i) {
        std::vector<double> v;
        for (const RunRecord& r : sessions[i])
          if (!r.warmup && r.ok && r.trace == trace && r.allocator == alloc)
            if (auto it = r.metrics.find(name); it != r.metrics.end()) v.push_back(it->second);
        if (v.empty()) continue;
        medians.push_back(median(v));
        at.push_back(i);
      }
      for (const ChangePoint& c : e_divisive(medians)) {
        Step s;
        s.trace = trace;
        s.allocator = alloc;
        s.metric = name;
        s.session = ids[at[c.index]];
        s.before = c.before;
        s.after = c.after;
        s.change = c.before != 0 ? c.after / c.before - 1 : 0;
        s.p = c.p;
        s.regression = m->lower_is_better ? c.after > c.before : c.after < c.before;
        out.push_back(s);
      }
    }
  return out;
}

}  // namespace heaplab::experiments
