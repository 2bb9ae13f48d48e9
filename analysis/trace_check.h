// `heaplab check`: validates a trace beyond what decoding checks (checksums,
// structure): dense ids, no use of objects that are not live (double free,
// free of an unknown object), global ordering, thread start/end placement,
// monotonic time per thread, flags that fit their operation, metadata JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capture/format/trace_reader.h"

namespace heaplab::analysis {

struct CheckProblem {
  uint64_t seq = 0;
  uint32_t thread = 0;
  std::string message;
};

struct CheckReport {
  uint64_t events = 0;
  uint64_t objects = 0;
  uint64_t problems = 0;             // all problems found
  std::vector<CheckProblem> listed;  // the first `max_listed` of them
  uint64_t lost_events = 0;          // from `lost` markers: a notice, not a problem
  // In a truncated trace: events referring to objects whose chunks were lost
  // (not listed as problems; the truncation is).
  uint64_t refs_to_lost_objects = 0;
  // Successful calls with an alignment that is not a power of two (glibc
  // rounds it up; other allocators may crash): a note; replays correct them.
  uint64_t odd_alignments = 0;
  // Sized or aligned deletes naming another size or alignment than the
  // object's after events were lost (the object may be another one at the
  // same address): a note, not a problem.
  uint64_t mismatches_after_loss = 0;
  bool ok() const { return problems == 0; }
};

// Decodes every event. Throws trace::TraceError on data that cannot be
// decoded (corrupt chunk); everything else is reported as a problem.
CheckReport check_trace(const trace::TraceReader& r, size_t max_listed = 20);

}  // namespace heaplab::analysis
