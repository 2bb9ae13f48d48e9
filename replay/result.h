// The result of one replay: one type that every reader uses.
//
// `heaplab replay` writes it as JSON ("format": "heaplab-replay-result",
// "format_version": 1; replay/README.md lists every field), the results
// store keeps it, and reports, plots, the dashboard, the comparison table,
// metrics and the runner read it back. result_from_json() is the one place
// that reads that JSON: everything else uses the typed fields below (an
// absent figure is an empty optional, never a made-up zero). to_json() gives
// the document back as it was read (fields no reader needs stay in it).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace heaplab::replay {

inline constexpr int kResultFormatVersion = 1;

// A document that is not a replay result this heaplab can read (a newer
// format_version, or not an object). what() is one line.
class ResultError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OpCounts {
  uint64_t calls = 0, expected = 0, null_results = 0, unexpected_results = 0;
};

struct OpLatency {
  uint64_t samples = 0;
  // p50, p90, p99, p99.9, p99.99, max (ns), where measured.
  std::optional<double> p50, p90, p99, p999, p9999, max;
};

struct Timeline {
  std::vector<double> t_ms;
  std::vector<double> heap_kib, rss_kib;
  std::vector<int64_t> live_bytes;
};

struct MemoryResult {
  std::optional<double> heap_peak_kib, heap_final_kib, peak_rss_kib;
  std::optional<double> heap_kib_at_live_peak;
  int64_t live_bytes_peak_sampled = 0;
  double live_peak_sampled_fraction = 0;  // of the trace's live peak: < 0.5, the samples missed it
  std::string at_live_peak_source;
  std::optional<double> frag_at_live_peak, frag_time_weighted, frag_final;
  uint64_t samples = 0;
  double interval_ms = 0;
  Timeline timeline;
  // Page footprint (mincore) and pages written (soft-dirty), where measured.
  bool has_footprint = false;
  std::optional<int64_t> pages_at_live_peak, pages_at_live_high, pages_at_end, pages_touched;
  std::string touched_why;  // why pages_touched is not measured
};

struct LatencyResult {
  uint32_t sample_every = 0;
  double timer_overhead_ns = 0, timer_resolution_ns = 0;
  std::map<std::string, OpLatency> ops;  // by op name
};

struct ReplayResult {
  nlohmann::json document;  // the whole result, as read

  // The trace replayed.
  std::string trace_path, trace_id;
  uint64_t trace_calls = 0, live_bytes_peak = 0;
  uint32_t recorded_threads = 0, replay_threads = 0;
  std::vector<std::string> warnings;

  // The allocator, and the machine it ran on.
  std::string allocator, load, library, version, build_id;
  std::string host, cpu_model, kernel;

  // How it ended: exit status "ok", "error", "crashed", ... ("" if not run);
  // `skipped` or `error` say why a replay did not run or failed.
  std::string exit_status;
  std::string skipped, error;

  // The replay's figures, when the replayer ran to its end.
  bool ran = false;  // the replayer ran to its end: wall_s is there
  double wall_s = 0;
  std::optional<double> calls_per_s, cpu_user_s, cpu_system_s;
  std::optional<double> max_rss_kib, minor_faults, major_faults;
  bool calls_match = false, results_match = false, faithful = false;
  std::map<std::string, OpCounts> ops;
  uint64_t cross_thread_waits = 0, cross_thread_wait_ns = 0, moved_failed_reallocs = 0;
  uint64_t bookkeeping_plan_bytes = 0, bookkeeping_table_bytes = 0;
  std::optional<MemoryResult> memory;
  std::optional<LatencyResult> latency;

  // "name/load" as tables show it.
  std::string label() const;
  // Why a replay that ran was not faithful, in a few words ("" if it was):
  // "calls DIFFER from the trace", or "results differ from the trace: 0 NULL
  // where it had a result, 1 results where it had NULL, 0 failed reallocs
  // that moved here".
  std::string unfaithful() const;
  // Whether the figures at the live peak mean anything (the samples saw at
  // least half of it).
  bool live_peak_measured() const { return memory && memory->live_peak_sampled_fraction >= 0.5; }
};

// Reads a result document (of any heaplab since format_version 1; a
// {"allocator", "skipped"} record of a replay that did not run too).
// Throws ResultError for a newer format_version or something not an object.
ReplayResult result_from_json(const nlohmann::json& j);
// The same for readers of stored results that go on past one they cannot
// read (an empty or damaged row, a newer heaplab's): nullopt then.
std::optional<ReplayResult> try_result_from_json(const nlohmann::json& j) noexcept;
nlohmann::json to_json(const ReplayResult& r);

}  // namespace heaplab::replay
