// Turns a raw capture file into a normalised trace: the threads' record
// streams merged by time, addresses turned into object ids, realloc's two
// records joined, frees of memory allocated before capture started counted
// and skipped. Streams: memory follows the live set and the thread count,
// never the number of events.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capture/format/trace_writer.h"
#include "capture/normalise/raw_reader.h"

namespace heaplab::normalise {

struct NormaliseOptions {
  trace::Codec codec = trace::kCodecZstd;
  int level = 3;
  // Live normalising (normalise_live): the level of the chunks written
  // while the program keeps every core busy, or the reader is behind, where
  // compressing competes with the program for the CPU (0: `level` always).
  // (On one core, a program using a tenth of it counts as busy.) Once the
  // program has ended, what is left takes `level`.
  int busy_level = 0;
  // Whether the program keeps every core busy now (asked after each poll);
  // unset: measured, from the CPU time it used over the last 100 ms.
  std::function<bool()> busy;
  // Live normalising: consume only while the shim holds the program back
  // (the blocks waiting at its limit), as a reader starved of CPU would.
  // For tests of the scratch disk's bound, which this reaches.
  bool consume_late = false;
  uint32_t chunk_events = 65536;
  // Merged into the metadata's "capture" object (allocator, exit status ...).
  nlohmann::json capture_metadata = nlohmann::json::object();
  // ns per TSC tick to use when the file's own clock pairs are too close
  // together (a process that ran for under a millisecond). 0 = none.
  double fallback_ns_per_tick = 0;
  // ns per TSC tick to use whatever the file says (0 = the file's own):
  // tests that compare a live normalising with one after the fact.
  double ns_per_tick = 0;
};

struct NormaliseReport {
  uint64_t records = 0;  // complete records read
  uint64_t events = 0;   // events written (with thread_start/thread_end)
  uint64_t calls = 0;    // allocation and release calls written
  uint64_t threads = 0;
  uint64_t objects = 0;
  uint64_t live_at_end = 0;              // objects never freed
  uint64_t unknown_frees = 0;            // frees of memory allocated before capture: skipped
  uint64_t unknown_reallocs = 0;         // reallocs of such memory: written as realloc(NULL, n)
  uint64_t reused_live = 0;              // an allocation returned a still-live address
  uint64_t dropped_calls = 0;            // calls made after capture stopped on an error (a full
                                         // disk ...): counted by the shim, in `holes` too
  int64_t stop_error = 0;                // why it stopped: errno, -1 without one, 0 = it did not
  uint64_t holes = 0;                    // events lost (records the program died while writing, or the
                                         // PT route's sequence gaps): written as `lost`
  uint64_t unfinished_reallocs = 0;      // a realloc the program never returned from
  uint64_t bad_records = 0;              // records with an unknown op: skipped
  uint64_t reordered = 0;                // records taken ahead of their timestamp to keep
                                         // an address's alloc/free order (unfenced TSC)
  uint64_t late = 0;                     // records read after the trace was written past their stamp
                                         // (beyond the skew window): a live reader that missed
                                         // them; their order with other threads' may be wrong
  uint64_t blocks_missing = 0;           // blocks claimed but not written
  uint64_t busy_level_events = 0;        // events in the chunks compressed at busy_level (0 if it is
                                         // 0 or `level`)
  uint64_t duration_ns = 0;              // first to last event, the shim's cost taken off (the native timeline)
  uint64_t captured_duration_ns = 0;     // the same as captured (the shim's cost in)
  uint64_t shim_cost_ns = 0;             // the shim's cost on the thread that paid most
  double event_cost_ns = 0;              // its calibrated cost per event
  uint64_t corrected_wall_ns = 0;        // the program's run (capture_metadata's wall_ns) less shim_cost_ns
  uint64_t memory_calls = 0;             // the program's own mmap/munmap/mremap/madvise/brk calls
  uint64_t regions = 0;                  // anonymous mappings it made
  uint64_t unknown_memory_releases = 0;  // releases of memory it did not map while captured
  uint64_t resident_counts = 0;          // resident-page counts of large blocks and mappings
  uint64_t latency_samples = 0;          // calls timed inside the allocator in the program
  uint64_t latency_samples_dropped = 0;  // thinned out past 16 Mi, evenly over the run (MemoryMap::kMaxLatencies)
  uint64_t memory_scratch_peak = 0;      // the memory records' sort file beside the trace at its
                                         // largest (bytes on disk; 0: they were held, under 262,144)
  uint64_t heap_peak = 0;                // peak of the live requested bytes
  uint64_t objects_peak = 0;             // peak of the objects live at once
  uint64_t mapped_peak = 0;              // peak of the bytes the program mapped itself
  uint64_t explained_peak = 0;           // peak of the two together, each block counted at its smallest
                                         // footprint in a malloc heap (an 8-byte header, 16-byte steps)
  uint64_t explained_heap = 0;           // the heap's part of it
  // explained_peak / the program's peak anonymous RSS (capture_metadata's
  // anon_rss_peak_kib, sampled by the launcher); -1 if not sampled.
  double coverage = -1;
  uint64_t bytes = 0;  // size of the trace written
  bool clean_exit = false;
  std::string clock;  // "tsc", "monotonic" or "none"
  // Each thread_end was written once its thread was found gone (a live
  // reader that consumes: never before the thread went); else right after
  // the thread's last record (it may have lived on).
  bool thread_ends_found_gone = false;
};

// Writes `out_path`. Throws RawError / trace::TraceError naming the file.
NormaliseReport normalise(RecordSource& in, const std::string& out_path, const NormaliseOptions& opt);

class LiveRawFile;

// Normalises a raw capture while its process writes it (raw_live.h) into
// `out_path`, timestamps from in.ns_per_tick() (the caller waits until it is
// known, or normalises after the fact): polls it every millisecond or two, writes the records no
// thread can still write one before, and returns once `ended()` said the
// process image has ended and everything is written. `final_metadata()`
// (called then) is merged into the metadata's "capture" object, as
// opt.capture_metadata would be. Memory and scratch disk follow the live set
// and the thread count, not the length of the run, but for the program's
// own memory records (mappings, timed calls, resident counts): from 262,144
// of them they are sorted through a file beside the trace, a few bytes each
// (NormaliseReport::memory_scratch_peak).
NormaliseReport normalise_live(LiveRawFile& in, const std::string& out_path, const NormaliseOptions& opt,
                               const std::function<bool()>& ended,
                               const std::function<nlohmann::json()>& final_metadata);

// Normalises the raw capture file at `raw_path` into `output`, written whole
// (common::write_then_rename: a failure leaves no partial trace).
NormaliseReport normalise_file(const std::string& raw_path, const std::string& output, const NormaliseOptions& opt);

nlohmann::json report_to_json(const NormaliseReport& r);

}  // namespace heaplab::normalise
