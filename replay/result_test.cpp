// Tests of the replay result contract: every typed field read from the
// document heaplab writes, absent figures as empty optionals, records of
// replays that did not run, the document given back unchanged, and a newer
// format refused in one line.
#include "replay/result.h"

#include <gtest/gtest.h>

namespace heaplab::replay {
namespace {

using nlohmann::json;

json full() {
  return json::parse(R"({
    "format": "heaplab-replay-result", "format_version": 1,
    "trace": {"path": "t.hlt", "id": "00ff", "calls": 1000, "recorded_threads": 2, "live_bytes_peak": 4096},
    "allocator": {"name": "jemalloc", "load": "direct", "library": "/lib/libjemalloc.so.2",
                  "version": "jemalloc 5.3.0", "build_id": "abc"},
    "replay_threads": 2, "warnings": ["w1"], "exit": {"status": "ok", "code": 0},
    "replay": {
      "wall_s": 0.5, "calls_per_s": 2000.0, "cpu": {"user_s": 0.25, "system_s": 0.125},
      "page_faults": {"minor": 10, "major": 0}, "max_rss_kib": 2048,
      "calls_match": true, "results_match": true, "faithful": true,
      "ops": {"free": {"calls": 500, "expected": 500, "null_results": 0, "unexpected_results": 0},
              "malloc": {"calls": 500, "expected": 500, "null_results": 1, "unexpected_results": 0}},
      "cross_thread_waits": {"count": 3, "total_ns": 300}, "moved_failed_reallocs": 0,
      "bookkeeping_bytes": {"plan": 40000, "object_table": 8000},
      "environment": {"host": "h", "cpu_model": "EPYC", "kernel": "6.1"},
      "memory": {"heap_peak_kib": 100, "heap_final_kib": 50, "peak_rss_kib": 200, "heap_kib_at_live_peak": 90,
                 "live_bytes_peak_sampled": 4096, "live_peak_sampled_fraction": 1.0,
                 "at_live_peak_source": "snapshot right after the trace's live-peak call",
                 "fragmentation": {"at_live_peak": 1.5, "time_weighted": 1.25, "final": 2.0},
                 "samples": 3, "interval_ms": 10.0,
                 "timeline": {"t_ms": [0, 10, 20], "heap_kib": [1, 100, 50], "rss_kib": [2, 3, 4],
                              "live_bytes": [0, 4096, 100]},
                 "footprint": {"at_live_high": {"pages": 7}, "at_live_peak": {"pages": 8}, "at_end": {"pages": 2},
                               "touched": {"method": "none", "why": "no soft-dirty; more"}}},
      "latency": {"sample_every": 4, "timer_overhead_ns": 9.5, "timer_resolution_ns": 1.0,
                  "ops": {"malloc": {"samples": 125, "p50_ns": 20, "p90_ns": 30, "p99_ns": 40, "p99.9_ns": 50,
                                     "p99.99_ns": 60, "max_ns": 70}}}
    }})");
}

TEST(Result, EveryTypedFieldIsRead) {
  const ReplayResult r = result_from_json(full());
  EXPECT_EQ(r.trace_path, "t.hlt");
  EXPECT_EQ(r.trace_id, "00ff");
  EXPECT_EQ(r.trace_calls, 1000u);
  EXPECT_EQ(r.recorded_threads, 2u);
  EXPECT_EQ(r.replay_threads, 2u);
  EXPECT_EQ(r.live_bytes_peak, 4096u);
  EXPECT_EQ(r.warnings, std::vector<std::string>{"w1"});
  EXPECT_EQ(r.label(), "jemalloc/direct");
  EXPECT_EQ(r.library, "/lib/libjemalloc.so.2");
  EXPECT_EQ(r.version, "jemalloc 5.3.0");
  EXPECT_EQ(r.build_id, "abc");
  EXPECT_EQ(r.host, "h");
  EXPECT_EQ(r.cpu_model, "EPYC");
  EXPECT_EQ(r.kernel, "6.1");
  EXPECT_EQ(r.exit_status, "ok");
  ASSERT_TRUE(r.ran);
  EXPECT_DOUBLE_EQ(r.wall_s, 0.5);
  EXPECT_EQ(r.calls_per_s, 2000.0);
  EXPECT_EQ(r.cpu_user_s, 0.25);
  EXPECT_EQ(r.cpu_system_s, 0.125);
  EXPECT_EQ(r.minor_faults, 10.0);
  EXPECT_EQ(r.max_rss_kib, 2048.0);
  EXPECT_TRUE(r.faithful);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops.at("malloc").null_results, 1u);
  EXPECT_EQ(r.cross_thread_waits, 3u);
  EXPECT_EQ(r.cross_thread_wait_ns, 300u);
  EXPECT_EQ(r.bookkeeping_plan_bytes + r.bookkeeping_table_bytes, 48000u);
  ASSERT_TRUE(r.memory);
  EXPECT_EQ(r.memory->heap_peak_kib, 100.0);
  EXPECT_EQ(r.memory->frag_time_weighted, 1.25);
  EXPECT_TRUE(r.live_peak_measured());
  EXPECT_EQ(r.memory->timeline.heap_kib, (std::vector<double>{1, 100, 50}));
  EXPECT_EQ(r.memory->timeline.live_bytes, (std::vector<int64_t>{0, 4096, 100}));
  EXPECT_EQ(r.memory->pages_at_live_peak, 8);
  EXPECT_EQ(r.memory->pages_at_end, 2);
  EXPECT_FALSE(r.memory->pages_touched);  // method none
  EXPECT_EQ(r.memory->touched_why, "no soft-dirty; more");
  ASSERT_TRUE(r.latency);
  EXPECT_EQ(r.latency->sample_every, 4u);
  EXPECT_EQ(r.latency->ops.at("malloc").p999, 50.0);
  EXPECT_EQ(r.latency->ops.at("malloc").max, 70.0);
}

TEST(Result, TheDocumentComesBackUnchanged) {
  const json j = full();
  EXPECT_EQ(to_json(result_from_json(j)), j);
}

TEST(Result, AbsentFiguresAreEmptyNotZero) {
  json j = full();
  j["replay"].erase("latency");
  j["replay"]["memory"].erase("heap_final_kib");
  j["replay"]["memory"]["live_peak_sampled_fraction"] = 0.25;
  j["replay"].erase("page_faults");
  j["replay"].erase("calls_per_s");
  j["replay"]["cpu"].erase("system_s");
  const ReplayResult r = result_from_json(j);
  EXPECT_TRUE(r.ran);
  EXPECT_FALSE(r.calls_per_s);
  EXPECT_FALSE(r.cpu_system_s);
  EXPECT_FALSE(r.latency);
  EXPECT_FALSE(r.memory->heap_final_kib);
  EXPECT_FALSE(r.minor_faults);
  EXPECT_FALSE(r.live_peak_measured());
}

TEST(Result, ReplaysThatDidNotRun) {
  const ReplayResult skipped =
      result_from_json({{"allocator", {{"name", "tcmalloc"}, {"load", "direct"}}}, {"skipped", "not installed"}});
  EXPECT_FALSE(skipped.ran);
  EXPECT_EQ(skipped.skipped, "not installed");
  EXPECT_EQ(skipped.label(), "tcmalloc/direct");
  json failed = full();
  failed.erase("replay");
  failed["exit"] = {{"status", "error"}, {"code", 2}};
  failed["error"] = "cannot load";
  const ReplayResult f = result_from_json(failed);
  EXPECT_FALSE(f.ran);
  EXPECT_EQ(f.exit_status, "error");
  EXPECT_EQ(f.error, "cannot load");
  EXPECT_FALSE(f.memory);
}

TEST(Result, ANewerFormatIsRefusedInOneLine) {
  json j = full();
  j["format_version"] = 2;
  try {
    result_from_json(j);
    FAIL() << "no error";
  } catch (const ResultError& e) {
    EXPECT_STREQ(e.what(), "replay result format_version 2 is newer than this heaplab reads (1)");
  }
  EXPECT_THROW(result_from_json(json::array()), ResultError);
  EXPECT_FALSE(try_result_from_json(j));
  EXPECT_FALSE(try_result_from_json(json::parse("x", nullptr, false)));  // a damaged stored row
  EXPECT_TRUE(try_result_from_json(full()));
}

}  // namespace
}  // namespace heaplab::replay
