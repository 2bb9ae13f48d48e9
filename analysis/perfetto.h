// `heaplab export --perfetto`: a trace (and replay results) as a Perfetto
// trace file (protobuf, the format Perfetto itself records: the UI at
// ui.perfetto.dev and trace_processor open it; analysis/perfetto_trace.proto
// is the part of Perfetto's schema it uses).
//
// What the file holds:
//  - a process "heaplab: TRACE" with a track per recorded thread (its OS tid
//    and name where the trace has them), and on it an instant per call:
//    named by its op, with size, count, alignment, object, consumed object,
//    and address (a trace with a replay's addresses) as arguments;
//  - counter tracks "live bytes" and "live objects" (requested bytes and
//    objects live after each call);
//  - per replay result given (heaplab replay -o): a process "replay on
//    ALLOC (LOAD)" with counters heap RSS, RSS, anonymous memory and live
//    bytes over the replay's own clock (its start at 0), its page footprint
//    at the live peak and at the end, and per op its latency percentiles.
// Times: the trace's clock (ns since capture start); a trace without
// timestamps puts its events 1 us apart, in seq order.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "capture/format/trace_reader.h"

namespace heaplab::analysis {

struct PerfettoOptions {
  uint64_t from = 0;                     // first seq exported
  uint64_t limit = UINT64_MAX;           // calls exported at most
  uint64_t max_counter_points = 200000;  // per counter track: a point every Nth change beyond
};

struct PerfettoSummary {
  uint64_t packets = 0;
  uint64_t calls = 0;           // instants written
  uint64_t counter_points = 0;  // counter values written (trace and replays)
  uint64_t results = 0;         // replay results added
};

// One replay result (heaplab replay -o JSON, or one element of a
// --allocator all array) and where it came from (for errors).
struct PerfettoResult {
  nlohmann::json result;
  std::string source;
};

// Writes the trace's calls (opt.from .. opt.limit) and the results to
// `out`. Throws trace::TraceError for a damaged trace and
// std::runtime_error ("SOURCE: not a replay result: ...") for a result
// without what it needs.
PerfettoSummary write_perfetto(const trace::TraceReader& r, const std::vector<PerfettoResult>& results,
                               std::ostream& out, const PerfettoOptions& opt = {});

}  // namespace heaplab::analysis
