// `heaplab report`: per trace, per metric, per allocator the median and
// spread of the repetitions, the ratio to the baseline allocator, and
// whether the difference is significant (two-sided Mann-Whitney U). Fed
// plain run records (from the results store, or made up in tests), so each
// output format is golden-tested.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace heaplab::experiments {

struct RunRecord {
  std::string trace;      // trace label
  std::string allocator;  // allocator label
  int rep = 0;
  bool warmup = false;  // warm-up runs are stored, never reported
  bool ok = true;       // the replay ran and was faithful
  std::map<std::string, double> metrics;
};

struct ReportOptions {
  std::string format = "table";      // table | md | csv | json
  std::string baseline;              // allocator label; "" = the first in the records
  std::vector<std::string> metrics;  // empty = default_metrics() present in the records
  double alpha = 0.05;
  std::string title;  // e.g. "quick-start (session ...)"
};

struct Summary {
  std::string trace, allocator, metric;
  size_t n = 0;
  double median = 0, q1 = 0, q3 = 0, min = 0, max = 0;
  double ratio = 0;  // median / the baseline's median (0 when undefined)
  double p = 1;      // Mann-Whitney against the baseline (1 for the baseline itself)
  bool significant = false;
};

// The summaries, in order: traces and allocators as first seen, metrics
// in catalogue order. Throws std::invalid_argument for an unknown metric
// or a baseline that is not among the allocators.
std::vector<Summary> summarise(const std::vector<RunRecord>& runs, const ReportOptions& opt);

// The report in `opt.format`; throws std::invalid_argument for an unknown
// format.
std::string report(const std::vector<RunRecord>& runs, const ReportOptions& opt);

}  // namespace heaplab::experiments
