// `heaplab dashboard`: a static site from the results store that opens
// offline (one index.html, its data and code inline, nothing fetched):
// per experiment, trace and metric the history across sessions (x: date
// and commit), one line per allocator with the spread of each session's
// runs, the newest session judged against the noise band of its history
// (experiments/history.h) and regressions flagged, the steps in each
// history found (E-divisive means, experiments/changepoint.h) and marked
// with the session and commit they start at; clicking a point shows
// that session's heap timeline and latency percentiles.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "experiments/store.h"

namespace heaplab::experiments {

struct DashboardSummary {
  std::string index;  // the page's path
  size_t experiments = 0, sessions = 0, series = 0;
  std::vector<std::string> regressions;  // "experiment/trace/metric/allocator: +12%"
  // Steps in a history (experiments/changepoint.h), oldest first:
  // "experiment/trace/metric/allocator: +12.0% (regression) from session ID (date, commit C)"
  std::vector<std::string> change_points;
};

// The data the page draws (also what tests check).
nlohmann::json dashboard_data(Store& store, const std::string& store_path);

// Writes OUTDIR/index.html; throws std::runtime_error if it cannot.
DashboardSummary write_dashboard(Store& store, const std::string& store_path, const std::string& outdir);

}  // namespace heaplab::experiments
