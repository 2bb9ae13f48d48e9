// A metric's history across sessions (nightly runs of one experiment):
// whether the newest session's median left the noise band of the ones
// before it. The band is centred on the median of the earlier sessions'
// medians; its half-width is the larger of 3 scaled MADs of those medians
// (how much the medians wander from night to night), twice the typical
// within-session spread (half the range of a session's runs) and 1% of
// the centre (a near-deterministic figure, such as a heap peak, must not
// flag a one-page change): a newest median beyond it in the worse
// direction is a regression, in the better direction an improvement.
#pragma once

#include <string>
#include <vector>

#include "experiments/report.h"

namespace heaplab::experiments {

struct SessionStat {
  double median = 0;
  double min = 0, max = 0;  // of the session's runs
  size_t n = 0;
};

struct Verdict {
  std::string state = "short";           // regression | improvement | steady | short (fewer than 3 earlier sessions)
                                         // (the dashboard adds "absent": not in the newest complete session)
  double centre = 0, low = 0, high = 0;  // the band, from the earlier sessions
  double newest = 0;
  double change = 0;  // newest / centre - 1
};

Verdict judge(const std::vector<SessionStat>& history, bool lower_is_better, size_t min_history = 3,
              double min_relative_band = 0.01);

// A step in a metric's history: a change point (experiments/changepoint.h)
// of the sessions' medians of one trace and allocator.
struct Step {
  std::string trace, allocator, metric;
  std::string session;  // where the new level starts
  double before = 0, after = 0, change = 0, p = 1;
  bool regression = false;  // for the worse
};

// The steps in the history of `sessions` (oldest first, each its runs;
// `ids` their ids) for each trace, allocator and one of `metrics` (all of
// an allocator's traces when `allocator` is "").
std::vector<Step> history_steps(const std::vector<std::string>& ids,
                                const std::vector<std::vector<RunRecord>>& sessions,
                                const std::vector<std::string>& metrics, const std::string& allocator = "");

}  // namespace heaplab::experiments
