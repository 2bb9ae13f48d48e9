// One event as a line of text or of JSON (`heaplab cat`).
//   text:  "SEQ tTHREAD [@TIME ]op(args) = #ID [(failed)]\n"
//   jsonl: {"seq":..,"thread":..,"op":..,["time"],["old"],["count"],["size"],["align"],["id"],["failed"]}
#pragma once

#include <string>
#include <unordered_map>

#include "capture/format/event.h"
#include "capture/format/memory_event.h"

namespace heaplab::analysis {

// Replaces `line` with the event's line (ending in '\n'). `address` (a
// replay's, format 1.2; 0: none) follows the object it belongs to: the
// result of a call that produces ("= #5 @0x55d0c0a012a0"), else the object
// consumed ("free(#5 @0x55d0c0a012a0)"); in JSON, "address".
void event_text(const trace::Event& e, bool has_time, std::string& line, uint64_t address = 0);
void event_jsonl(const trace::Event& e, bool has_time, std::string& line, uint64_t address = 0);
// `line` (ending in '\n') with " # NOTE" after it, padded to 49 columns as
// the seed's annotations (cat --annotate, layout --annotate).
void append_note(std::string& line, const std::string& note);

// Lifetimes for `heaplab cat --annotate`: fed every event of the trace in
// seq order, it says of each that releases an object (free, the deletes,
// realloc's old object) the object's requested size and its age, in events
// and (with timestamps) in ns, as the Compact Memory Traces seed's
// lifetimes.py did: "16 bytes, allocated 1 lines ago". Memory follows the
// live objects.
class LifetimeAnnotator {
 public:
  struct Age {
    bool known = false;  // the event releases an object whose allocation was seen
    uint64_t bytes = 0, events = 0, ns = 0;
  };
  Age observe(const trace::Event& e);
  // The text of an age: "8 bytes, allocated 1 lines ago[, 2500 ns ago]".
  static std::string text(const Age& a, bool has_time);
  // `line` (ending in '\n') with " # TEXT" after it, padded to 49 columns as the seed's.
  static void append(std::string& line, const Age& a, bool has_time);

 private:
  struct Born {
    uint64_t seq, time, bytes;
  };
  std::unordered_map<uint64_t, Born> live_;
};

// A memory event (format 1.1): "after SEQ tTHREAD [@TIME ]op(region R, offset, length[, pages][ -> region N, length])".
void memory_event_text(const trace::MemoryEvent& e, bool has_time, std::string& line);
// The same as one JSON object a line: {"op":"unmap","after":12,"thread":0,
// "time":...,"region":3,"offset":0,"length":4096,"pages":1}, with only the
// fields its op has (cat --memory --format jsonl).
void memory_event_jsonl(const trace::MemoryEvent& e, bool has_time, std::string& line);

}  // namespace heaplab::analysis
