// The side-by-side table of `heaplab replay --allocator a,b,...`, on fixed
// result records: the exact text (a golden test of the output format).
#include "replay/compare.h"

#include <gtest/gtest.h>

namespace heaplab::replay {
namespace {

using nlohmann::json;

json record(const std::string& name, const std::string& load, double wall, uint64_t heap_peak_kib, double frag) {
  return {{"allocator", {{"name", name}, {"load", load}}},
          {"replay",
           {{"wall_s", wall},
            {"calls_per_s", 1e6 / wall},
            {"faithful", true},
            {"calls_match", true},
            {"page_faults", {{"minor", 1234}, {"major", 0}}},
            {"max_rss_kib", 30000},
            {"memory",
             {{"heap_peak_kib", heap_peak_kib},
              {"heap_kib_at_live_peak", heap_peak_kib - 100},
              {"heap_final_kib", 512},
              {"peak_rss_kib", 20480},
              {"live_peak_sampled_fraction", 1.0},
              {"fragmentation", {{"at_live_peak", frag}, {"time_weighted", frag * 1.5}}}}}}}};
}

TEST(Comparison, TableOfReplaysSideBySide) {
  std::vector<json> rs = {record("glibc", "preload", 0.5, 10240, 1.1), record("jemalloc", "direct", 0.25, 8192, 1.0)};
  EXPECT_EQ(
      comparison_table(rs),
      "allocator        wall s  Mcalls/s  heap peak  at live pk  frag pk  frag avg  heap end  max RSS  faults  "
      "faithful\n"
      "glibc/preload     0.500      2.00       10.0         9.9     1.10      1.65       0.5     20.0    1234  yes\n"
      "jemalloc/direct   0.250      4.00        8.0         7.9     1.00      1.50       0.5     20.0    1234  yes\n"
      "heap: anonymous RSS less the replayer's own bookkeeping, MiB (peak, at the live-bytes peak, at the end);\n"
      "frag: heap RSS / live requested bytes at the live peak (pk) and time-weighted (avg); max RSS: VmHWM, MiB;\n"
      "faults: minor page faults during the replay\n");
}

// Latency columns appear when any replay timed its calls; a value below the
// timer's resolution reads "<N"; a replay that failed or was skipped keeps
// its row, and the reason follows the table; fragmentation is not shown when
// the samples missed the live peak.
TEST(Comparison, LatencyFailuresAndMissedPeaks) {
  json timed = record("mimalloc", "preload", 0.2, 4096, 1.25);
  timed["replay"]["latency"] = {
      {"timer_resolution_ns", 10.0},
      {"ops", {{"malloc", {{"p50_ns", 0.0}, {"p99_ns", 120.4}}}, {"free", {{"p50_ns", 12.0}, {"p99_ns", 45.6}}}}}};
  json missed = record("tcmalloc", "preload", 0.1, 2048, 2.0);
  missed["replay"]["memory"]["live_peak_sampled_fraction"] = 0.25;
  missed["replay"]["faithful"] = false;
  const json failed = {{"allocator", {{"name", "glibc"}, {"load", "direct"}}},
                       {"replay", {{"exit", "signal 11"}}},
                       {"error", "the replayer was killed by signal 11 (Segmentation fault)"}};
  const json skipped = {{"allocator", {{"name", "tcmalloc"}, {"load", "direct"}}},
                        {"skipped", "heaplab-replay-tcmalloc not built"}};
  EXPECT_EQ(
      comparison_table({timed, missed, failed, skipped}),
      "allocator         wall s  Mcalls/s  heap peak  at live pk  frag pk  frag avg  heap end  max RSS  faults"
      "  malloc p50  malloc p99  free p50  free p99  faithful\n"
      "mimalloc/preload   0.200      5.00        4.0         3.9     1.25      1.88       0.5     20.0    1234"
      "         <10         120        12        46  yes\n"
      "tcmalloc/preload   0.100     10.00        2.0           -        -         -       0.5     20.0    1234"
      "           -           -         -         -  calls only\n"
      "glibc/direct           -         -          -           -        -         -         -        -       -"
      "           -           -         -         -  FAILED\n"
      "tcmalloc/direct        -         -          -           -        -         -         -        -       -"
      "           -           -         -         -  skipped\n"
      "heap: anonymous RSS less the replayer's own bookkeeping, MiB (peak, at the live-bytes peak, at the end);\n"
      "frag: heap RSS / live requested bytes at the live peak (pk) and time-weighted (avg); max RSS: VmHWM, MiB;\n"
      "faults: minor page faults during the replay; p50/p99: ns per call, timer cost subtracted (<N: below the "
      "timer's resolution)\n"
      "failed: glibc/direct: the replayer was killed by signal 11 (Segmentation fault)\n"
      "skipped: tcmalloc/direct: heaplab-replay-tcmalloc not built\n");
}

// The replays' warnings follow the table, each once: bare where every
// replay that ran gave it, else with the names of those that did.
TEST(Comparison, WarningsOnceEach) {
  json a = record("glibc", "preload", 0.5, 10240, 1.1), b = record("jemalloc", "preload", 0.25, 8192, 1.0);
  const json skipped = {{"allocator", {{"name", "tcmalloc"}, {"load", "direct"}}},
                        {"skipped", "heaplab-replay-tcmalloc not built"}};
  a["warnings"] = {"3 replay threads on 2 CPUs",
                   "the kept replay plan was damaged (plan: x): removed, and built again"};
  b["warnings"] = {"3 replay threads on 2 CPUs"};
  const std::string t = comparison_table({a, b, skipped});
  EXPECT_EQ(t.substr(t.find("skipped: ")),
            "skipped: tcmalloc/direct: heaplab-replay-tcmalloc not built\n"
            "warning: 3 replay threads on 2 CPUs\n"
            "warning: glibc/preload: the kept replay plan was damaged (plan: x): removed, and built again\n");
}

}  // namespace
}  // namespace heaplab::replay
