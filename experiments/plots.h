// SVG plots of a session (`heaplab report --plots DIR`), written by hand
// (no plotting library in the dependency list; the figures are simple):
// per trace, the heap RSS over time of each allocator's median run, malloc
// latency percentile curves (log scale), and per reported metric bars of the
// medians with min-max error bars.
#pragma once

#include <string>
#include <vector>

#include "experiments/store.h"

namespace heaplab::experiments {

// Writes the plots of `session` into `dir` and returns their paths.
std::vector<std::string> write_plots(Store& store, const std::string& session, const std::vector<std::string>& metrics,
                                     const std::string& dir);

}  // namespace heaplab::experiments
