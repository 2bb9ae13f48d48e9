// The metadata block every heaplab writer puts into a trace (FORMAT.md,
// "Metadata"): what made the trace, on which host, with which clock.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace heaplab::import {

// Tool version, e.g. "0.1.0".
const char* tool_version();

// {"format": "heaplab-trace", "format_version": "1.0", "tool": "heaplab",
//  "tool_version": ..., "created": UTC ISO-8601, "host": {name, kernel, arch},
//  "capture": {"method": method}, "clock": clock, "command_line": [...]}
nlohmann::json base_metadata(const std::string& method, const std::string& clock,
                             const std::vector<std::string>& command_line);

}  // namespace heaplab::import
