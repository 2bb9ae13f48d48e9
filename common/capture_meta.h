// What a capture's metadata (the trace's "capture" object) says, read the
// same way by every command that reads it (heaplab stats, heaplab replay).
// Header only: its readers link nlohmann_json, common itself does not.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/text.h"

namespace heaplab::common {

// times_per_thread() of a capture object: its shim_cost_ns (0 if absent or
// not a number), whether it has time_correction, and `threads`.
inline bool times_per_thread(const nlohmann::json& capture, uint64_t threads) {
  const auto cost = capture.find("shim_cost_ns");
  return times_per_thread(cost != capture.end() && cost->is_number() ? cost->get<double>() : 0.0,
                          capture.contains("time_correction"), threads);
}

}  // namespace heaplab::common
