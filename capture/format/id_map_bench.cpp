// The object-id tables of plan building, stats and check: IdMap (a ring of
// the last ids made, the rest hashed) against FlatMap (all hashed) and
// SplitFlatMap (all hashed, in 16 parts at a higher load), on the
// id stream of a program like the churn benchmark: ids made in order, half
// the objects freed within a few calls, the rest after a long, random life
// (tens of thousands of calls), so the live set stays about constant.
//   build/capture/format/id_map_bench --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true
// The argument: the live set's size (objects).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "capture/format/bench_main.h"
#include "capture/format/flat_map.h"
#include "capture/format/id_map.h"

namespace {

bool g_smoke = false;  // --heaplab_smoke: tiny inputs, for the ctest smoke run

struct Value {  // as the plan builder's entry: 24 bytes
  uint64_t bytes, ref;
  uint32_t thread;
};

// Operations: a positive id is made, a negative one freed.
const std::vector<int64_t>& stream(size_t live) {
  static std::vector<int64_t> ops;
  static size_t made_for = 0;
  if (made_for == live) return ops;
  made_for = live;
  ops.clear();
  const size_t n = g_smoke ? 20000 : 8'000'000;
  std::mt19937_64 rng(42);
  std::vector<int64_t> pool;  // long-lived objects
  int64_t next = 1;
  while (ops.size() < n) {
    // A short-lived temporary: made and freed two calls later.
    const int64_t tmp = next++;
    ops.push_back(tmp);
    // A long-lived object in, and (once the pool is full) a random one out.
    const int64_t keep = next++;
    ops.push_back(keep);
    ops.push_back(-tmp);
    if (pool.size() < live) {
      pool.push_back(keep);
    } else {
      const size_t i = rng() % pool.size();
      ops.push_back(-pool[i]);
      pool[i] = keep;
    }
  }
  return ops;
}

template <class Map>
void run(benchmark::State& state) {
  const std::vector<int64_t>& ops = stream(size_t(state.range(0)));
  uint64_t sum = 0;
  for (auto _ : state) {
    Map m;
    for (int64_t op : ops) {
      if (op > 0) {
        m.put(uint64_t(op), Value{uint64_t(op), uint64_t(op), 1});
      } else {
        Value v{};
        m.erase(uint64_t(-op), &v);
        sum += v.bytes;
      }
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(int64_t(state.iterations() * ops.size()));
}

void BM_FlatMap(benchmark::State& state) { run<heaplab::FlatMap<Value>>(state); }
void BM_IdMap(benchmark::State& state) { run<heaplab::IdMap<Value>>(state); }
// The normaliser's live table: 16 parts at a load of up to 3/4.
void BM_SplitFlatMap(benchmark::State& state) { run<heaplab::SplitFlatMap<Value>>(state); }
BENCHMARK(BM_FlatMap)->Arg(1000)->Arg(30000)->Arg(1000000)->ArgName("live")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SplitFlatMap)->Arg(1000)->Arg(30000)->Arg(1000000)->ArgName("live")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IdMap)->Arg(1000)->Arg(30000)->Arg(1000000)->ArgName("live")->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return heaplab::bench_main(argc, argv, &g_smoke); }
