// One event as a line of text or of JSON (`heaplab cat`).
//   text:  "SEQ tTHREAD [@TIME ]op(args) = #ID [(failed)]\n"
//   jsonl: {"seq":..,"thread":..,"op":..,["time"],["old"],["count"],["size"],["align"],["id"],["failed"]}
#pragma once

#include <string>

#include "capture/format/event.h"
#include "capture/format/memory_event.h"

namespace heaplab::analysis {

// Replaces `line` with the event's line (ending in '\n').
void event_text(const trace::Event& e, bool has_time, std::string& line);
void event_jsonl(const trace::Event& e, bool has_time, std::string& line);
// A memory event (format 1.1): "after SEQ tTHREAD [@TIME ]op(region R, offset, length[, pages][ -> region N, length])".
void memory_event_text(const trace::MemoryEvent& e, bool has_time, std::string& line);

}  // namespace heaplab::analysis
