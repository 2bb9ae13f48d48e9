// Several replays of one trace side by side: one row per replay (allocator
// and load mode), the figures users compare allocators by. Fed the result
// records `run_replay` returns (plain JSON), so it is tested on fixed
// records; `heaplab replay --allocator a,b,...` prints it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace heaplab::replay {

// The table, then a line per column explaining it. A run that failed keeps
// its row with the reason instead of figures.
std::string comparison_table(const std::vector<nlohmann::json>& results);

}  // namespace heaplab::replay
