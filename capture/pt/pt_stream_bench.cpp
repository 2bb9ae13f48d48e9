// Decode rate of the ptwrite route's core: the PT packet decoder over a
// synthetic PT stream (pt_synth: PSB+ every 256 events, five PTW packets
// per event) plus event reassembly (ptw_assembler), in heap events per
// second on one core (a heap event is five ptwrite packets). The target for the whole direct decoder
// (perf.data in, trace out) is 25 M events/s; the note's measurements of the
// other routes on this kind of machine: `perf script --itrace=w` text ~1 M/s,
// with a dlfilter ~6.5 M/s, libipt's packet decoder alone ~32 M/s.
//
//   build/capture/pt/pt_stream_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "capture/format/bench_main.h"
#include "capture/pt/pt_stream.h"
#include "capture/pt/pt_synth.h"

namespace {

using namespace heaplab::pt;

bool g_smoke = false;

const std::vector<uint8_t>& stream(size_t n) {
  static std::vector<uint8_t> bytes;
  static size_t made = 0;
  if (made != n) {
    std::vector<PtwEvent> ev(n);
    for (size_t i = 0; i < n; ++i) {
      ev[i].op = uint32_t(i % 3 == 0 ? 22 : 0);  // malloc / free mix
      ev[i].seq = uint32_t(i);
      ev[i].a = 0x7f0000000000ull + (i * 2654435761u % (1u << 24)) * 16;
      ev[i].b = 16 + i % 4096;
      ev[i].tsc = 1000000 + i * 40;
    }
    bytes = encode_ptw_stream(ev, {256, {}, false});
    made = n;
  }
  return bytes;
}

void BM_DecodeStream(benchmark::State& state) {
  const size_t n = g_smoke ? 10000 : 10000000;
  const std::vector<uint8_t>& bytes = stream(n);
  uint64_t events = 0, sum = 0;
  for (auto _ : state) {
    PtwAssembler a;
    StreamStats st;
    decode_stream(
        bytes.data(), bytes.size(), a, [&](const PtwEvent& e) { sum += e.a; }, st);
    events += a.events();
    if (a.events() != n) state.SkipWithError("events lost");
  }
  benchmark::DoNotOptimize(sum);
  state.counters["events/s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
  state.counters["bytes/event"] = double(bytes.size()) / double(n);
}
BENCHMARK(BM_DecodeStream)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) { return heaplab::bench_main(argc, argv, &g_smoke); }
