// Small text helpers shared by every layer's reports.
#pragma once

#include <cstdint>
#include <string>

namespace heaplab::common {

// 1234567 -> "1,234,567".
std::string group_digits(uint64_t v);

// Below this share of the program's peak anonymous memory, a trace does not
// explain the program's memory, and capture, stats and replay say so.
inline constexpr double kCoverageWarning = 0.8;

// "the trace explains 97% of the program's peak anonymous memory (245.1 of
// 251.2 MiB)", or a warning below kCoverageWarning.
std::string coverage_text(double coverage, uint64_t explained_bytes, uint64_t program_kib);

}  // namespace heaplab::common
