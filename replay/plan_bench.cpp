// Building a replay plan (build_plan): the cost per event of decoding,
// merging and planning a trace and writing its plan into a memfd, with the
// builder's helper threads (as `heaplab replay` builds) and without (all on
// one thread, as the replayer builds its own). With helpers, the CPU time
// Google Benchmark reports is the planning thread's own (the helpers run
// beside it): on two cores the build's wall time follows it once the
// helpers keep up.
//
//   HEAPLAB_BENCH_TRACE=churn.hlt build/replay/plan_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
//
// Without HEAPLAB_BENCH_TRACE: SPEC CPU2006 456.hmmer (the CMT sample trace
// in the repository: about 180,000 calls, one thread).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "capture/format/bench_main.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_writer.h"
#include "capture/import/cmt_text.h"
#include "capture/import/input_stream.h"
#include "replay/plan.h"

namespace {

bool g_smoke = false;  // --heaplab_smoke: the ctest smoke run

struct BenchTrace {
  std::unique_ptr<heaplab::trace::TraceReader> reader;
  std::string name;
};

BenchTrace& bench_trace() {
  static BenchTrace bt = [] {
    BenchTrace t;
    const char* env = std::getenv("HEAPLAB_BENCH_TRACE");
    if (env && *env && !g_smoke) {
      t.reader = heaplab::trace::TraceReader::open(env);
      t.name = env;
      return t;
    }
    const std::string path =
        (std::filesystem::temp_directory_path() / ("plan_bench." + std::to_string(getpid()) + ".hlt")).string();
    auto in = heaplab::import::InputStream::open(std::string(HEAPLAB_SOURCE_DIR) +
                                                 "/capture/testdata/cmt/456.hmmer.test.txt.bz2");
    // (Removed whatever throws; the reader keeps it open.)
    struct Remove {
      const std::string& path;
      ~Remove() { std::filesystem::remove(path); }
    } remove{path};
    heaplab::trace::TraceWriter w(path, heaplab::trace::WriterOptions{});
    heaplab::import::import_cmt_text(*in, w);
    w.close();
    t.reader = heaplab::trace::TraceReader::open(path);
    t.name = "456.hmmer";
    return t;
  }();
  return bt;
}

void BM_BuildPlan(benchmark::State& state) {
  BenchTrace& t = bench_trace();
  heaplab::replay::PlanOptions opt;
  opt.helpers = state.range(0) != 0;
  opt.live = state.range(1) != 0;
  uint64_t events = 0;
  for (auto _ : state) {
    heaplab::replay::PlanSummary s;
    const int fd = heaplab::replay::build_plan(*t.reader, opt, s);
    close(fd);
    events = s.events;
  }
  state.SetLabel(t.name);
  state.SetItemsProcessed(int64_t(state.iterations() * events));
  // (Seconds an event: the console prints it in ns, JSON in seconds.)
  state.counters["time_per_event"] =
      benchmark::Counter(double(events), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// Arguments: helpers (0/1), live sums (0/1: --live-peak's plan).
BENCHMARK(BM_BuildPlan)
    ->Name("plan/build")
    ->ArgNames({"helpers", "live"})
    ->Args({1, 0})
    ->Args({0, 0})
    ->Args({1, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return heaplab::bench_main(argc, argv, &g_smoke); }
