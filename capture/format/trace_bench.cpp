// Trace format speed: decoding (what a replay pays per event before it can
// run) and writing (what capture normalisation and import pay).
//   build/capture/format/trace_bench --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true
// The "codec" argument: 0 = none, 1 = lz4, N >= 2 = zstd at level N-1.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "capture/format/trace_reader.h"
#include "capture/format/bench_main.h"
#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"

namespace {

using namespace heaplab::trace;

bool g_smoke = false;  // --heaplab_smoke: tiny inputs, for the ctest smoke run

size_t bench_events() { return g_smoke ? 20000 : 10'000'000; }

// A heap-like event mix: malloc/free on `threads` threads, 20% cross-thread.
const std::vector<Event>& events(uint32_t threads) {
  static std::vector<Event> cache[9];
  auto& v = cache[threads];
  if (v.empty()) {
    testutil::GenOptions o;
    o.threads = threads;
    o.all_ops = false;
    o.timestamps = true;
    v = testutil::generate(42, bench_events(), o);
  }
  return v;
}

// Codec argument: 0 none, 1 lz4, otherwise zstd at that level.
WriterOptions options(int codec) {
  WriterOptions opt;
  opt.timestamps = true;
  opt.codec = codec == 0 ? kCodecNone : codec == 1 ? kCodecLz4 : kCodecZstd;
  opt.level = codec <= 1 ? 1 : codec - 1;
  return opt;
}

std::string trace_file(uint32_t threads, int level) {
  std::string path = "/tmp/heaplab_bench_" + std::to_string(getpid()) + "_" + std::to_string(threads) + "_" +
                     std::to_string(level) + ".hlt";
  static std::vector<std::string> made;
  for (const auto& m : made)
    if (m == path) return path;
  TraceWriter w(path, options(level));
  for (Event e : events(threads)) w.append(e);
  w.close();
  made.push_back(path);
  std::atexit([] {
    for (const auto& m : made) std::remove(m.c_str());
  });
  return path;
}

// Decodes every thread's events in batches, as a replay's threads do.
uint64_t decode_threads(const TraceReader& r, std::vector<Event>& buf) {
  uint64_t n = 0;
  for (uint32_t t : r.active_threads()) {
    ThreadCursor c(r, t);
    while (size_t k = c.next(buf.data(), buf.size())) {
      n += k;
      benchmark::DoNotOptimize(buf.data());
    }
  }
  return n;
}

// Decodes the whole trace in global order (stats, check, cat, the plan builder).
uint64_t decode_merged(const TraceReader& r, std::vector<Event>& buf) {
  uint64_t n = 0;
  MergedCursor c(r);
  while (size_t k = c.next(buf.data(), buf.size())) {
    n += k;
    benchmark::DoNotOptimize(buf.data());
  }
  return n;
}

// Decoding every thread's events, as a replay's threads do, on one core.
void BM_DecodeThreads(benchmark::State& state) {
  const uint32_t threads = static_cast<uint32_t>(state.range(0));
  const int level = static_cast<int>(state.range(1));
  auto r = TraceReader::open(trace_file(threads, level));
  std::vector<Event> buf(1024);
  uint64_t n = 0;
  for (auto _ : state) {
    n += decode_threads(*r, buf);
  }
  state.SetItemsProcessed(static_cast<int64_t>(n));
  state.counters["bytes_per_event"] = double(r->file_size()) / double(r->event_count());
}
BENCHMARK(BM_DecodeThreads)
    ->ArgsProduct({{1, 4}, {0, 1, 2, 4}})
    ->ArgNames({"threads", "codec"})
    ->Unit(benchmark::kMillisecond);

// The trace file HEAPLAB_BENCH_TRACE names, or null (the benchmark skipped).
const char* bench_trace(benchmark::State& state) {
  const char* path = std::getenv("HEAPLAB_BENCH_TRACE");
  if (!path) state.SkipWithError("set HEAPLAB_BENCH_TRACE to a .hlt file");
  return path;
}

// Decoding a given trace file (HEAPLAB_BENCH_TRACE), e.g. a real import.
void BM_DecodeFile(benchmark::State& state) {
  const char* path = bench_trace(state);
  if (!path) return;
  auto r = TraceReader::open(path);
  std::vector<Event> buf(1024);
  uint64_t n = 0;
  for (auto _ : state) {
    n += decode_threads(*r, buf);
  }
  state.SetItemsProcessed(static_cast<int64_t>(n));
}
BENCHMARK(BM_DecodeFile)->Unit(benchmark::kMillisecond);

// The same file in global order (what a replay's plan builder reads).
void BM_DecodeFileMerged(benchmark::State& state) {
  const char* path = bench_trace(state);
  if (!path) return;
  auto r = TraceReader::open(path);
  std::vector<Event> buf(2048);
  uint64_t n = 0;
  for (auto _ : state) n += decode_merged(*r, buf);
  state.SetItemsProcessed(static_cast<int64_t>(n));
}
BENCHMARK(BM_DecodeFileMerged)->Unit(benchmark::kMillisecond);

// Decoding in global order (stats, check, cat).
void BM_DecodeMerged(benchmark::State& state) {
  const uint32_t threads = static_cast<uint32_t>(state.range(0));
  auto r = TraceReader::open(trace_file(threads, 1));
  std::vector<Event> buf(1024);
  uint64_t n = 0;
  for (auto _ : state) n += decode_merged(*r, buf);
  state.SetItemsProcessed(static_cast<int64_t>(n));
}
BENCHMARK(BM_DecodeMerged)->Arg(1)->Arg(2)->Arg(4)->ArgName("threads")->Unit(benchmark::kMillisecond);

// Writing: encode, compress, append to a file. The input cycles through a
// cache-resident window of 65,536 generated events, as a capture hands the
// writer events that are hot in cache, rather than streaming a 640 MB array
// from memory (the writer assigns seq and ids, so repeats are valid input).
void BM_Write(benchmark::State& state) {
  const uint32_t threads = static_cast<uint32_t>(state.range(0));
  const int level = static_cast<int>(state.range(1));
  const auto& ev = events(threads);
  const size_t window = std::min<size_t>(ev.size(), 65536);
  const size_t total = bench_events();
  const std::string path = "/tmp/heaplab_bench_w_" + std::to_string(getpid()) + ".hlt";
  uint64_t n = 0;
  for (auto _ : state) {
    TraceWriter w(path, options(level));
    for (size_t i = 0, j = 0; i < total; ++i) {
      Event e = ev[j];
      if (++j == window) j = 0;
      w.append(e);
    }
    w.close();
    n += total;
  }
  std::remove(path.c_str());
  state.SetItemsProcessed(static_cast<int64_t>(n));
}
BENCHMARK(BM_Write)->ArgsProduct({{1, 4}, {0, 1, 2, 4}})->ArgNames({"threads", "codec"})->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return heaplab::bench_main(argc, argv, &g_smoke); }
