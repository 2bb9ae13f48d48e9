// Plots of a session (`heaplab report --plots DIR`): DIR/index.html, a page
// that opens offline and draws with Chart.js (experiments/web/plots.*): per
// trace, the heap RSS over time of each allocator's median run, malloc
// latency percentile curves (log scale), and per reported metric bars of the
// medians with min-max whiskers.
#pragma once

#include <string>
#include <vector>

#include "experiments/store.h"

namespace heaplab::experiments {

// Writes the plots page of `session` into `dir` and returns its path.
std::vector<std::string> write_plots(Store& store, const std::string& session, const std::vector<std::string>& metrics,
                                     const std::string& dir);

}  // namespace heaplab::experiments
