// `heaplab stats`: what a trace contains. One pass over the events in global
// order with a table of live objects, so memory follows the live set, not
// the trace length.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_reader.h"

namespace heaplab::analysis {

// Bucket 0 holds the value 0; bucket k (1..64) holds [2^(k-1), 2^k).
struct Log2Histogram {
  std::array<uint64_t, 65> buckets{};
  uint64_t samples = 0;
  static unsigned bucket_of(uint64_t v) { return v == 0 ? 0 : 64 - __builtin_clzll(v); }
  void add(uint64_t v) {
    ++buckets[bucket_of(v)];
    ++samples;
  }
  // A bucket's range for people: "0", "16..31", "9,223,372,036,854,775,808..".
  static std::string label(unsigned k);
  // The bucket holding the q-quantile (0..1) of the samples.
  unsigned quantile_bucket(double q) const {
    const double want = q * double(samples);
    uint64_t seen = 0;
    for (unsigned k = 0; k < buckets.size(); ++k) {
      seen += buckets[k];
      if (buckets[k] && double(seen) >= want) return k;
    }
    return 0;
  }
};

struct Peak {
  uint64_t value = 0;
  uint64_t seq = 0;
  uint64_t time = 0;
};

struct TraceStats {
  uint64_t events = 0;
  uint32_t threads = 0;              // threads with events
  std::vector<uint32_t> thread_ids;  // their indices, ascending; the
                                     // per-thread vectors below follow it
  bool has_time = false;
  uint64_t first_time = 0, last_time = 0;
  std::array<uint64_t, trace::kOpCount> ops{};
  std::array<uint64_t, trace::kOpCount> failed{};  // calls that reported failure
  std::vector<std::array<uint64_t, trace::kOpCount>> thread_ops;
  std::vector<uint64_t> thread_events;

  uint64_t objects_created = 0;
  uint64_t objects_freed = 0;
  uint64_t objects_freed_by_other_thread = 0;
  uint64_t null_frees = 0;       // free(NULL), delete of nullptr
  uint64_t unknown_frees = 0;    // consumed objects that were not live (see `check`)
  uint64_t lost_events = 0;      // reported by `lost` markers
  uint64_t bytes_requested = 0;  // sum over all produced objects (saturating)

  Peak live_bytes;  // peak of the sum of requested bytes of live objects
  uint64_t live_objects_at_bytes_peak = 0;
  Peak live_objects;
  uint64_t live_bytes_end = 0;
  uint64_t live_objects_end = 0;

  // The program's own memory (format 1.1): calls by MemOp, mappings, the
  // peak of the bytes mapped, and of heap and mappings together (trace order).
  std::array<uint64_t, trace::kMemOpMax + 1> memory_ops{};
  uint64_t regions = 0;
  uint64_t mapped_peak = 0;
  uint64_t combined_peak = 0;
  uint64_t objects_with_resident_pages = 0;
  uint64_t program_timed_calls = 0;  // calls timed inside the allocator in the program (capture --latency)
  // From the capture's metadata: the program's peak anonymous RSS and the
  // share of it the trace explains (absent: 0 and -1).
  uint64_t program_anon_peak_kib = 0;
  uint64_t explained_peak_bytes = 0;
  double coverage = -1;
  // Its times had the shim's cost taken off thread by thread (an older
  // heaplab's capture of several threads: common::times_per_thread).
  bool times_per_thread = false;
  std::string metadata_not_read;  // why the metadata JSON was not parsed (common/json.h's bounds), or ""

  Log2Histogram sizes;            // requested bytes per produced object
  Log2Histogram lifetime_events;  // seq(free) - seq(alloc) of freed objects
  Log2Histogram lifetime_ns;      // time(free) - time(alloc), with timestamps only
  // The same per size class of the freed object (its requested bytes' log2 bucket).
  std::array<Log2Histogram, 65> lifetime_events_by_size{};
  std::array<Log2Histogram, 65> lifetime_ns_by_size{};
  // Live requested bytes after 0%, 5%, ..., 100% of the events (21 points;
  // for `heaplab diff`: two traces' curves side by side at the same progress).
  std::array<uint64_t, 21> live_curve{};

  double cross_thread_free_fraction() const {
    return objects_freed ? double(objects_freed_by_other_thread) / double(objects_freed) : 0.0;
  }
};

TraceStats compute_stats(const trace::TraceReader& r);
nlohmann::json stats_to_json(const TraceStats& s);
std::string stats_to_text(const TraceStats& s);

}  // namespace heaplab::analysis
