// A replay's addresses, written back into a trace (`heaplab replay
// --emit-trace OUT.hlt`): the same events, plus the address each call
// returned or released on the allocator replayed (format 1.2's ADDR
// blocks), so that layouts can be studied offline (`heaplab cat` shows
// them, `heaplab layout` measures them) and two allocators compared.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/layout.h"
#include "replay/launch.h"

namespace heaplab::replay {

struct EmittedTrace {
  uint64_t events = 0;
  uint64_t addressed = 0;  // events with an address
  uint64_t bytes = 0;      // of the file
};

// Writes `trace`'s events, threads, memory calls and metadata to `out`
// (through common::write_then_rename) with addresses[i] as the address of
// event i (seq order). The metadata gains "replay" (`replay`: the allocator
// and load mode). Throws std::runtime_error with one line: the trace must
// be complete (a truncated trace's ids have holes a writer cannot keep),
// and `addresses` must have an entry per event.
EmittedTrace write_trace_with_addresses(const std::string& trace, std::vector<uint64_t> addresses,
                                        const std::string& out, const nlohmann::json& replay);

// Each event's line of text, with its layout note (heaplab layout --annotate).
using LayoutLines = std::function<void(const std::string& line)>;

// The layout of `trace`'s events given their addresses (`address(i, seq)`
// for event i in seq order, whose seq is `seq`), from a replay that ran them
// in the trace's order or not (analysis/layout.h). Throws trace::TraceError
// for a damaged trace.
analysis::LayoutSummary measure_layout(const std::string& trace,
                                       const std::function<uint64_t(uint64_t, uint64_t)>& address, bool in_order,
                                       const LayoutLines* lines = nullptr);

// One allocator's layout: a replay that records addresses (opt.addresses is
// set here), then measure_layout. `outcome` is the replay's; the summary is
// empty when it did not finish.
struct ReplayLayout {
  ReplayOutcome outcome;
  bool measured = false;
  analysis::LayoutSummary summary;
};
ReplayLayout replay_layout(ReplayOptions opt, const LayoutLines* lines = nullptr);

}  // namespace heaplab::replay
