// `heaplab diff SESSION_A SESSION_B`: two sessions of the results store side
// by side, every metric of every trace and allocator both have: medians,
// B / A, and whether they differ significantly (two-sided Mann-Whitney U at
// alpha), the direction said as better or worse. Fed plain run records, so
// each output format is golden-tested.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/report.h"

namespace heaplab::experiments {

struct SessionDiffOptions {
  std::string a, b;             // the sessions' names, for the heading
  std::string format = "text";  // text, md or json
  double alpha = 0.05;
};

// Throws std::invalid_argument for an unknown format, alpha outside (0, 1),
// or two sessions with no trace and allocator in common.
std::string session_diff(const std::vector<RunRecord>& a, const std::vector<RunRecord>& b,
                         const SessionDiffOptions& opt);

// Two replay results (`heaplab replay -o` JSON, one replay each): every
// metric both have (experiments/metrics.h), A, B and B / A, better or worse
// by the metric's direction (one run each: no significance). Throws
// std::invalid_argument naming a side that is not a replay result.
std::string result_diff(const nlohmann::json& a, const nlohmann::json& b, const SessionDiffOptions& opt);

}  // namespace heaplab::experiments
