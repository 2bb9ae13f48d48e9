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
};

// Every metric, in report order.
const std::vector<Metric>& all_metrics();
// The metric called `name`, or nullptr.
const Metric* find_metric(const std::string& name);
// The metrics reported when an experiment names none.
const std::vector<std::string>& default_metrics();

// The metrics present in one replay result (a replay without latency has
// no latency metrics; one without memory measurement no memory metrics).
std::map<std::string, double> extract_metrics(const nlohmann::json& result);

}  // namespace heaplab::experiments
