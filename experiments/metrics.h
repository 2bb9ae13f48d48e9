// The figures an experiment keeps of each replay, by name, taken from the
// replay's result JSON (replay/README.md): the columns of the results
// store and the rows of a report.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace heaplab::experiments {

struct Metric {
  std::string name;   // column name, e.g. "heap_peak_mib"
  std::string label;  // for people, e.g. "heap peak"
  std::string unit;   // "s", "MiB", "ns", "" ...
  bool lower_is_better = true;
  // heaplab gate's budget for it when none is given, in percent the worse
  // way (used for the default metrics, default_metrics(); the others are
  // judged only with a budget): above what it moved between sessions of one
  // build on this project's 2-core VM (scripts/bench-gate-noise.py, two
  // 20-40 ms replays, 14 gates: peak RSS under 1%, the heap peak under 5%,
  // wall time and fragmentation under 10%). 0: not judged without a budget
  // (the latency percentiles moved by up to 254%).
  int default_budget_pct = 0;
};

// Every metric, in report order.
const std::vector<Metric>& all_metrics();
// The metric called `name`, or nullptr.
const Metric* find_metric(const std::string& name);
// The metrics reported when an experiment names none.
const std::vector<std::string>& default_metrics();
// Every metric's name, comma-separated (for "unknown metric" errors).
std::string metric_names();

// A figure for people: 3 significant digits below 1000, whole numbers
// above, "-" for NaN; with a metric, followed by its unit ("12.3 MiB").
std::string figure(double v);
std::string figure(double v, const Metric& m);
// A p-value for people: 3 decimals, or 2 significant digits below 0.001.
std::string p_value(double p);

// The metrics present in one replay result (a replay without latency has
// no latency metrics; one without memory measurement no memory metrics).
std::map<std::string, double> extract_metrics(const nlohmann::json& result);

}  // namespace heaplab::experiments
