// Decode rate of the three Intel PT decoders, side by side on one synthetic
// recording: 10 M ptwrite payloads (2 M heap events of five payloads each,
// 4 threads, per-thread AUX buffers, PSB+ every 256 events) in a pipe-mode
// perf.data, the layout perf record writes. Each route goes from perf.data
// to decoded events (pt_import's decode_perf_pt; the time is the route's own
// work, not writing the raw file that all three share):
//   direct    heaplab reads perf.data and the PT packets itself
//   dlfilter  perf script --itrace=w with heaplab's dlfilter (perf decodes)
//   text      perf script --itrace=w -F pid,tid,synth, parsed
// Rates are per ptwrite payload (perf's unit: one sample each) and per heap event.
//
//   build/capture/pt/pt_import_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "capture/format/bench_main.h"
#include "capture/pt/pt_import.h"
#include "capture/pt/pt_synth.h"

namespace {

using namespace heaplab::pt;
namespace fs = std::filesystem;

bool g_smoke = false;

struct Recording {
  std::string dir, path;
  uint64_t events = 0;
  Recording() {
    char t[] = "/tmp/heaplab-pt-bench-XXXXXX";
    dir = mkdtemp(t);
    path = dir + "/perf.data";
    const size_t per_thread = g_smoke ? 2500 : 500000;
    std::vector<SynthThread> th(4);
    for (uint32_t k = 0; k < 4; ++k) {
      th[k].pid = 1000;
      th[k].tid = 1000 + k;
      th[k].comm = "t" + std::to_string(k);
      th[k].stream.psb_every = 256;
      th[k].events.resize(per_thread);
      for (size_t i = 0; i < per_thread; ++i) {
        PtwEvent& e = th[k].events[i];
        e.seq = uint32_t(i);
        e.op = i % 2 ? 22 : 0;  // malloc, free
        e.a = 0x7f0000000000ull + k * 0x100000000ull + (i / 2 % 4096) * 64;
        e.b = i % 2 ? 0 : 16 + i % 1000;
        e.tsc = 1000000000ull + i * 300 + k;
      }
    }
    events = per_thread * 4;
    const std::vector<uint8_t> b = synth_perf_data(th, {});
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
  ~Recording() { fs::remove_all(dir); }
};

const Recording& recording() {
  static Recording r;
  return r;
}

void BM_Decode(benchmark::State& state) {
  const Recording& rec = recording();
  PtImportOptions opt;
  opt.decoder = Decoder(state.range(0));
  const char* bin = getenv("HEAPLAB_BINARY_DIR");
  opt.dlfilter = std::string(bin && *bin ? bin : ".") + "/cli/libheaplab_ptw_dlfilter.so";
  if (opt.decoder == Decoder::dlfilter && access(opt.dlfilter.c_str(), R_OK) != 0)
    opt.dlfilter = fs::canonical("/proc/self/exe").parent_path().string() + "/../../cli/libheaplab_ptw_dlfilter.so";
  uint64_t words = 0, events = 0;
  for (auto _ : state) {
    std::string raw;
    PtImportReport r;
    try {
      r = decode_perf_pt(rec.path, rec.dir, opt, &raw);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
    if (r.events != rec.events) state.SkipWithError("events lost");
    state.SetIterationTime(r.decode_seconds);
    words += r.ptw_words;
    events += r.events;
    fs::remove(raw);
    fs::remove(raw + ".blocks");
  }
  state.SetLabel(decoder_name(opt.decoder));
  state.counters["ptwrite/s"] = benchmark::Counter(double(words), benchmark::Counter::kIsRate);
  state.counters["events/s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
  state.counters["MB"] = double(fs::file_size(rec.path)) / 1e6;
}
BENCHMARK(BM_Decode)
    ->ArgName("decoder")
    ->Arg(int(Decoder::direct))
    ->Arg(int(Decoder::dlfilter))
    ->Arg(int(Decoder::text))
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return heaplab::bench_main(argc, argv, &g_smoke); }
