// The replay loop's own cost per call, measured against a bump-pointer
// backend that does next to nothing (so what is left is the engine: reading
// the step, dispatching on the op, the object table, the counters), and its
// scaling over independent threads. Also the engine with glibc's malloc
// against a hand-written loop making the same calls, so the engine's share
// of a real replay is visible.
//
//   build/replay/engine_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <vector>

#include "capture/format/bench_main.h"
#include "allocators/backend.h"
#include "capture/format/trace_reader.h"
#include "capture/import/cmt_text.h"
#include "replay/engine.h"

namespace {

using heaplab::replay::RunParams;
using heaplab::replay::Slot;
using heaplab::replay::Step;
using heaplab::replay::ThreadResult;
using heaplab::replay::Touch;
using heaplab::trace::Op;

bool g_smoke = false;  // --heaplab_smoke: tiny inputs, for the ctest smoke run

size_t steps_per_thread() { return g_smoke ? 20000 : 4'000'000; }

// The trivial backend: each thread bumps a pointer through its own 64 MiB
// region (never touched, so never faulted in) and frees nothing.
struct Bump : heaplab::allocators::LibcApi {
  static constexpr const char* kName = "bump";
  static constexpr size_t kRegion = size_t{64} << 20;
  static inline thread_local char* cur = nullptr;
  static inline thread_local char* base = nullptr;
  static void* alloc(size_t n) {
    if (!base) {
      base = static_cast<char*>(mmap(nullptr, kRegion, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
      cur = base;
    }
    n = (n + 15) & ~size_t{15};
    if (cur + n > base + kRegion) cur = base;
    void* p = cur;
    cur += n;
    return p;
  }
  static void* malloc(size_t n) { return alloc(n); }
  static void* calloc(size_t c, size_t n) { return alloc(c * n); }
  static void* realloc(void*, size_t n) { return alloc(n); }
  static void free(void*) {}
  static void* op_new(size_t n) { return alloc(n); }
  static void op_delete(void*) {}
  static void op_delete_sized(void*, size_t) {}
};

// A heap-like call sequence for one thread: malloc, calloc, realloc, new;
// each object freed later (free, delete, sized delete), most soon after and
// some much later; objects ids [first_id, ...) in order of creation.
std::vector<Step> make_steps(size_t n, uint64_t first_id, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Step> v;
  v.reserve(n);
  std::vector<uint64_t> live;
  uint64_t next = first_id;
  const auto head = [](Op op, uint64_t id) { return uint64_t(op) | id << 16; };
  while (v.size() < n) {
    const bool alloc = live.empty() || (live.size() < 4096 && rng() % 2 == 0);
    if (alloc) {
      const unsigned r = unsigned(rng() % 100);
      const uint64_t size = r < 80 ? 8 + rng() % 120 : r < 98 ? 128 + rng() % 4000 : 4096 + rng() % 65536;
      Step s{};
      s.size = size;
      if (r % 10 == 0) {
        s.head = head(Op::calloc, next);
        s.arg = 1;
      } else if (r % 10 == 1 && !live.empty()) {
        const size_t k = live.size() - 1 - rng() % std::min<size_t>(live.size(), 8);
        s.head = head(Op::realloc, next);
        s.old = live[k];
        live.erase(live.begin() + long(k));
      } else {
        s.head = head(r % 10 < 5 ? Op::malloc : Op::op_new, next);
      }
      v.push_back(s);
      live.push_back(next++);
    } else {
      // Mostly one of the youngest objects, sometimes any.
      const size_t k = rng() % 4 ? live.size() - 1 - rng() % std::min<size_t>(live.size(), 16) : rng() % live.size();
      Step s{};
      const unsigned r = unsigned(rng() % 3);
      s.head = uint64_t(r == 0 ? Op::free : r == 1 ? Op::op_delete : Op::op_delete_sized);
      s.old = live[k];
      s.size = 16;
      live[k] = live.back();
      live.pop_back();
      v.push_back(s);
    }
  }
  return v;
}

struct Fixture {
  std::vector<std::vector<Step>> steps;
  std::vector<std::vector<heaplab::replay::PlanStep>> packed;  // as a plan holds them
  Slot* table = nullptr;
};

std::vector<heaplab::replay::PlanStep> packed_of(const std::vector<Step>& steps) {
  std::vector<heaplab::replay::PlanStep> v;
  v.reserve(steps.size() * 2);
  heaplab::replay::PlanStep p[2];
  for (const Step& s : steps) v.insert(v.end(), p, p + heaplab::replay::pack_step(s, p));
  return v;
}

// Per thread its own objects: thread t's ids start at t * steps + 1.
Fixture& fixture(size_t threads) {
  static Fixture f[3];
  static std::mutex m;  // Threads(2): both benchmark threads get here at once
  std::lock_guard<std::mutex> lock(m);
  Fixture& x = f[threads];
  if (x.table) return x;
  const size_t n = steps_per_thread();
  for (size_t t = 0; t < threads; ++t) {
    x.steps.push_back(make_steps(n, t * n + 1, 42 + t));
    x.packed.push_back(packed_of(x.steps.back()));
  }
  const size_t bytes = (threads * n + 1) * sizeof(Slot);
  x.table = static_cast<Slot*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  x.table[0].store(heaplab::replay::kNullObject);
  return x;
}

template <class B>
void BM_Engine(benchmark::State& state) {
  const size_t threads = size_t(state.threads());
  Fixture& f = fixture(threads);
  const auto& steps = f.steps[size_t(state.thread_index())];
  const auto& packed = f.packed[size_t(state.thread_index())];
  RunParams prm;
  prm.table = f.table;
  prm.touch = Touch::none;
  for (auto _ : state) {
    ThreadResult r;
    const uint64_t t0 = heaplab::replay::monotonic_ns();
    heaplab::replay::run_steps<B>(packed.data(), packed.data() + packed.size(), prm, r);
    // The loop only, as the replayer times it (run_steps counts the calls
    // per op after taking end_ns).
    state.SetIterationTime(double(r.end_ns - t0) / 1e9);
    benchmark::DoNotOptimize(r.calls.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations() * steps.size()));
  state.counters["ns_per_call"] = benchmark::Counter(
      double(steps.size()), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// The same calls as the glibc replay, made by a loop with the objects in a
// plain array: what a hand-written replayer would cost.
void BM_HandLoopGlibc(benchmark::State& state) {
  Fixture& f = fixture(1);
  const auto& steps = f.steps[0];
  std::vector<void*> obj(steps.size() + 1);
  for (auto _ : state) {
    for (const Step& s : steps) {
      const uint64_t id = s.head >> 16;
      switch (static_cast<Op>(s.head & 0xff)) {
        case Op::malloc:
          obj[id] = std::malloc(s.size);
          break;
        case Op::calloc:
          obj[id] = std::calloc(s.arg, s.size);
          break;
        case Op::realloc:
          obj[id] = std::realloc(obj[s.old], s.size);
          break;
        case Op::op_new:
          obj[id] = ::operator new(s.size);
          break;
        case Op::free:
          std::free(obj[s.old]);
          break;
        case Op::op_delete:
          ::operator delete(obj[s.old]);
          break;
        case Op::op_delete_sized:
          ::operator delete(obj[s.old], s.size);
          break;
        default:
          break;
      }
    }
    benchmark::DoNotOptimize(obj.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations() * steps.size()));
  state.counters["ns_per_call"] = benchmark::Counter(
      double(steps.size()), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// A real program's calls: SPEC CPU2006 456.hmmer (the CMT sample trace in
// the repository, 1.9 M calls), or the trace in $HEAPLAB_BENCH_TRACE.
struct RealTrace {
  std::unique_ptr<heaplab::replay::MappedPlan> plan;
  Slot* table = nullptr;
  std::string name;
};

RealTrace& real_trace() {
  static RealTrace rt = [] {
    RealTrace t;
    std::string path;
    const char* env = std::getenv("HEAPLAB_BENCH_TRACE");
    if (env && *env) {
      path = env;
      t.name = path;
    } else {
      path = (std::filesystem::temp_directory_path() / ("engine_bench." + std::to_string(getpid()) + ".hlt")).string();
      auto in = heaplab::import::InputStream::open(std::string(HEAPLAB_SOURCE_DIR) +
                                                   "/capture/testdata/cmt/456.hmmer.test.txt.bz2");
      heaplab::trace::TraceWriter w(path, heaplab::trace::WriterOptions{});
      heaplab::import::import_cmt_text(*in, w);
      w.close();
      t.name = "456.hmmer";
    }
    auto reader = heaplab::trace::TraceReader::open(path);
    heaplab::replay::PlanSummary summary;
    const int fd = heaplab::replay::build_plan(*reader, {}, summary);
    t.plan = std::make_unique<heaplab::replay::MappedPlan>(fd);
    close(fd);
    if (!env || !*env) std::filesystem::remove(path);
    t.table = static_cast<Slot*>(mmap(nullptr, (t.plan->slots() + 1) * sizeof(Slot), PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    t.table[0].store(heaplab::replay::kNullObject);
    return t;
  }();
  return rt;
}

// The engine over a real trace's calls (all its replay threads, one after
// the other, on this thread: the per-call cost, not a concurrent replay).
void BM_EngineBumpRealTrace(benchmark::State& state) {
  RealTrace& t = real_trace();
  RunParams prm;
  prm.table = t.table;
  prm.touch = Touch::none;
  for (auto _ : state) {
    uint64_t ns = 0;
    for (uint32_t k = 0; k < t.plan->threads(); ++k) {
      ThreadResult r;
      const heaplab::replay::PlanStep* s = t.plan->steps(k);
      prm.origin = s;
      const uint64_t t0 = heaplab::replay::monotonic_ns();
      // (On through each kStepNewThread: recorded threads one after another.)
      uint64_t pos = 0;
      do {
        r.new_thread = false;
        heaplab::replay::run_steps<Bump>(s + pos, s + t.plan->step_count(k), prm, r);
        pos = r.progress.load(std::memory_order_relaxed);
      } while (r.new_thread);
      ns += r.end_ns - t0;
      benchmark::DoNotOptimize(r.calls.data());
    }
    state.SetIterationTime(double(ns) / 1e9);
  }
  const auto& ops = t.plan->expected_ops();  // (its steps also hold kStepExt, handoff and memory steps)
  const double calls = double(std::accumulate(ops.begin(), ops.end(), uint64_t{0}));
  state.SetLabel(t.name);
  state.SetItemsProcessed(int64_t(double(state.iterations()) * calls));
  state.counters["ns_per_call"] =
      benchmark::Counter(calls, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

struct Glibc : heaplab::allocators::LibcApi {
  static constexpr const char* kName = "glibc";
};

BENCHMARK(BM_Engine<Bump>)->Name("engine/bump")->Threads(1)->Threads(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineBumpRealTrace)->Name("engine/bump/real_trace")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Engine<Glibc>)->Name("engine/glibc")->Threads(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_HandLoopGlibc)->Name("hand_loop/glibc")->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return heaplab::bench_main(argc, argv, &g_smoke); }
