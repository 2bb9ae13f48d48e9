// `heaplab diff A.hlt B.hlt`: two traces side by side, from their stats
// (analysis/trace_stats.h): events and calls per operation, threads,
// objects, bytes, the live-bytes peak and the live-bytes curve at the same
// progress (0%, 5%, ..., 100% of each trace's events), and the size and
// lifetime histograms bucket by bucket. Each row: A, B, B - A and B / A.
// Fed plain stats, so each output format is golden-tested.
#pragma once

#include <string>

#include "analysis/trace_stats.h"

namespace heaplab::analysis {

struct DiffNames {
  std::string a, b;  // how the two sides are named (their paths)
};

// format: text, md or json; throws std::invalid_argument for another.
std::string trace_diff(const TraceStats& a, const TraceStats& b, const DiffNames& names, const std::string& format);

}  // namespace heaplab::analysis
