// The machine a replay ran on, for the result: CPU model, CPUs online and
// usable by this process, kernel, transparent huge page settings.
#pragma once

#include <nlohmann/json.hpp>

namespace heaplab::replay {

nlohmann::json environment_json();

}  // namespace heaplab::replay
