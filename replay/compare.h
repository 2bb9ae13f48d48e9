// Several replays of one trace side by side: one row per replay (allocator
// and load mode), the figures users compare allocators by. Fed the result
// records `run_replay` returns (plain JSON), so it is tested on fixed
// records; `heaplab replay --allocator a,b,...` prints it.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "replay/launch.h"

namespace heaplab::replay {

// The table, then a line per column explaining it. A run that failed keeps
// its row with the reason instead of figures.
std::string comparison_table(const std::vector<nlohmann::json>& results);

// --allocator a,b,... | all and --load preload|direct|both|a,b as lists.
// `all` is every known allocator. Throws ReplayError ("--allocator: an empty
// name in '...'", "--load: expected preload, direct or both, not '...'").
std::vector<std::string> allocator_list(const std::string& spec);
std::vector<std::string> load_list(const std::string& spec);

// Replays the trace of `base` on each allocator in each load mode, in turn,
// each its own process. With `all`, allocators that are not installed (or a
// replayer not built: NotAvailable) are kept as {"allocator", "skipped"}
// records, and a replay that cannot start for any other reason as a failed
// one (exit code 2); otherwise every name must resolve before anything
// runs, and a replay that cannot start throws ReplayError "NAME (LOAD): why".
struct Comparison {
  std::vector<nlohmann::json> results;  // one record per replay (run_replay's result)
  int worst_exit = 0;                   // the highest exit code among the replays
};
struct ComparisonObserver {
  std::function<void(const std::string& allocator, const std::string& load)> starting;
  std::function<void(const std::string& allocator, const std::string& load, const std::string& error)> failed;
};
Comparison replay_each(const ReplayOptions& base, const std::vector<std::string>& allocators,
                       const std::vector<std::string>& loads, bool all, const ComparisonObserver& observe = {});

}  // namespace heaplab::replay
