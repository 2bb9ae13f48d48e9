#include "experiments/report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/text.h"
#include "experiments/metrics.h"
#include "experiments/results.h"
#include "experiments/stats.h"

namespace heaplab::experiments {

namespace {

template <class T>
void add_unique(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

std::string metric_head(const std::string& name) {
  const Metric* m = find_metric(name);
  return m->unit.empty() ? m->label : m->label + " (" + m->unit + ")";
}

}  // namespace

std::vector<Summary> summarise(const std::vector<RunRecord>& runs, const ReportOptions& opt) {
  if (!(opt.alpha > 0 && opt.alpha < 1))  // (as gate and diff)
    throw std::invalid_argument(fmt::format("--alpha {}: a significance level between 0 and 1", opt.alpha));
  std::vector<std::string> traces, allocators, present;
  for (const RunRecord& r : runs) {
    add_unique(traces, r.trace);  // in the matrix order, warm-ups included
    add_unique(allocators, r.allocator);
    if (r.warmup || !r.ok) continue;
    for (const auto& [k, v] : r.metrics) add_unique(present, k);
  }
  std::vector<std::string> metrics;
  if (opt.metrics.empty()) {
    for (const std::string& m : default_metrics())
      if (std::find(present.begin(), present.end(), m) != present.end()) metrics.push_back(m);
  } else {
    for (const std::string& m : opt.metrics) {
      if (!find_metric(m)) {
        throw std::invalid_argument("unknown metric '" + m + "' (known: " + metric_names() + ")");
      }
      metrics.push_back(m);
    }
  }
  // Catalogue order.
  std::vector<std::string> ordered;
  for (const Metric& m : all_metrics())
    if (std::find(metrics.begin(), metrics.end(), m.name) != metrics.end()) ordered.push_back(m.name);
  const std::string baseline = opt.baseline.empty() ? (allocators.empty() ? "" : allocators[0]) : opt.baseline;
  if (!allocators.empty() && std::find(allocators.begin(), allocators.end(), baseline) == allocators.end())
    throw std::invalid_argument("baseline '" + baseline + "' is not among the allocators run");

  std::vector<Summary> out;
  for (const std::string& t : traces) {
    for (const std::string& m : ordered) {
      const auto samples = [&](const std::string& a) {
        std::vector<double> v;
        for (const RunRecord& r : runs) {
          if (r.warmup || !r.ok || r.trace != t || r.allocator != a) continue;
          if (auto it = r.metrics.find(m); it != r.metrics.end()) v.push_back(it->second);
        }
        return v;
      };
      const std::vector<double> base = samples(baseline);
      const double base_median = median(base);
      for (const std::string& a : allocators) {
        const std::vector<double> v = samples(a);
        if (v.empty()) continue;
        Summary s;
        s.trace = t;
        s.allocator = a;
        s.metric = m;
        s.n = v.size();
        s.median = median(v);
        s.q1 = quantile(v, 0.25);
        s.q3 = quantile(v, 0.75);
        s.min = *std::min_element(v.begin(), v.end());
        s.max = *std::max_element(v.begin(), v.end());
        s.ratio = !base.empty() && base_median != 0 ? s.median / base_median : 0;
        if (a != baseline && !base.empty()) {
          s.p = mann_whitney(v, base).p;
          s.significant = v.size() >= 2 && base.size() >= 2 && s.p < opt.alpha;
        }
        out.push_back(s);
      }
    }
  }
  return out;
}

std::string report(const std::vector<RunRecord>& runs, const ReportOptions& opt) {
  if (opt.format != "table" && opt.format != "md" && opt.format != "csv" && opt.format != "json")
    throw std::invalid_argument("--format: expected table, md, csv or json, not '" + opt.format + "'");
  const std::vector<Summary> sums = summarise(runs, opt);
  std::vector<std::string> allocators;
  for (const RunRecord& r : runs) add_unique(allocators, r.allocator);
  const std::string baseline = opt.baseline.empty() ? (allocators.empty() ? "" : allocators[0]) : opt.baseline;

  if (opt.format == "csv") {
    std::string s = "trace,allocator,metric,n,median,q1,q3,min,max,ratio_to_baseline,p_value,significant\n";
    for (const Summary& x : sums)
      s += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(x.trace), csv_field(x.allocator), x.metric,
                       x.n, x.median, x.q1, x.q3, x.min, x.max, x.ratio, x.p, x.significant ? 1 : 0);
    return s;
  }
  if (opt.format == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const Summary& x : sums)
      j.push_back({{"trace", x.trace},
                   {"allocator", x.allocator},
                   {"metric", x.metric},
                   {"n", x.n},
                   {"median", x.median},
                   {"q1", x.q1},
                   {"q3", x.q3},
                   {"min", x.min},
                   {"max", x.max},
                   {"ratio_to_baseline", x.ratio},
                   {"p_value", x.p},
                   {"significant", x.significant}});
    return nlohmann::json{{"baseline", baseline}, {"alpha", opt.alpha}, {"summaries", j}}.dump(2) + "\n";
  }

  // table and md: per trace, a row per metric, a column per allocator (the
  // baseline first); each cell "median ±spread% ratio", * where significant.
  const bool md = opt.format == "md";
  std::string s;
  if (!opt.title.empty()) s += md ? "# " + opt.title + "\n" : opt.title + "\n";
  std::vector<std::string> traces, metrics;
  for (const Summary& x : sums) {
    add_unique(traces, x.trace);
    add_unique(metrics, x.metric);
  }
  std::vector<std::string> columns = {baseline};
  for (const std::string& a : allocators)
    if (a != baseline) columns.push_back(a);
  for (const std::string& t : traces) {
    // The runs counted per allocator (not per metric: a metric some runs
    // lack does not make fewer runs).
    size_t reps = 0, fewest = SIZE_MAX;
    for (const std::string& a : allocators) {
      size_t n = 0;
      for (const RunRecord& r : runs) n += !r.warmup && r.ok && r.trace == t && r.allocator == a ? 1 : 0;
      if (n == 0) continue;
      reps = std::max(reps, n);
      fewest = std::min(fewest, n);
    }
    const std::string legend = fmt::format(
        "median of {} run(s), ±half the range as % of it, ratio to {}; * differs from {} (Mann-Whitney U, p < {})",
        fewest < reps ? fmt::format("{} to {}", fewest, reps) : std::to_string(reps), baseline, baseline, opt.alpha);
    s += md ? "\n## " + t + "\n\n" + legend + "\n\n" : "\ntrace " + t + ": " + legend + "\n";
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> heads = {"metric"};
    heads.insert(heads.end(), columns.begin(), columns.end());
    rows.push_back(heads);
    for (const std::string& m : metrics) {
      std::vector<std::string> row = {metric_head(m)};
      for (const std::string& a : columns) {
        auto it = std::find_if(sums.begin(), sums.end(),
                               [&](const Summary& x) { return x.trace == t && x.allocator == a && x.metric == m; });
        if (it == sums.end()) {
          row.push_back("-");
          continue;
        }
        std::string cell = figure(it->median);
        if (it->n > 1 && it->max != it->min && it->median != 0)
          cell += fmt::format(" ±{:.0f}%", 50 * (it->max - it->min) / std::fabs(it->median));
        if (a != baseline && it->ratio > 0) cell += fmt::format(" {:.2f}x", it->ratio);
        if (it->significant) cell += "*";
        row.push_back(cell);
      }
      rows.push_back(row);
    }
    if (md) {
      for (size_t r = 0; r < rows.size(); ++r) {
        s += "|";
        for (const std::string& c : rows[r]) s += " " + c + " |";
        s += "\n";
        if (r == 0) {
          s += "|";
          for (size_t c = 0; c < rows[0].size(); ++c) s += c ? "---:|" : "---|";
          s += "\n";
        }
      }
    } else {
      // The metric left, the allocators' cells right-aligned.
      s += common::align_columns(rows, "l" + std::string(heads.size() - 1, 'r'));
    }
  }
  // Runs left out of the figures (failed, or not faithful): said, with the
  // traces and allocators none of whose runs is in them.
  std::vector<std::pair<std::string, std::string>> pairs;
  std::map<std::pair<std::string, std::string>, std::pair<size_t, size_t>> out_of;  // left out, of all
  for (const RunRecord& r : runs) {
    if (r.warmup) continue;
    const auto key = std::make_pair(r.trace, r.allocator);
    if (!out_of.count(key)) pairs.push_back(key);
    auto& [left, all] = out_of[key];
    ++all;
    left += r.ok ? 0 : 1;
  }
  std::string left;
  for (const auto& key : pairs)
    if (const auto& [n, all] = out_of[key]; n != 0)
      left += fmt::format("{}{} on {}: {} of {}", left.empty() ? "" : "; ", key.first, key.second, n, all);
  if (!left.empty())
    s += fmt::format("\nleft out, failed or not faithful (heaplab results export lists them): {}\n", left);
  return s;
}

}  // namespace heaplab::experiments
