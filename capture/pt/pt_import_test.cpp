// The Intel PT route end to end without PT hardware: synthetic perf.data
// files (libipt-encoded streams in AUXTRACE records, pt_synth) decoded by
// all three decoders (direct; the dlfilter and the text of the real `perf
// script`), normalised into traces that must be identical, with exact
// event and loss counts, and the errors a bad file gets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/trace_check.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/normalise/normalise.h"
#include "capture/pt/pt_import.h"
#include "capture/pt/pt_synth.h"

namespace heaplab::pt {
namespace {

namespace fs = std::filesystem;
using trace::Op;

std::string binary_dir() {
  const char* b = getenv("HEAPLAB_BINARY_DIR");
  return b && *b ? b : HEAPLAB_TEST_BINARY_DIR;
}
std::string dlfilter() { return binary_dir() + "/cli/libheaplab_ptw_dlfilter.so"; }

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/heaplab-pt-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// A thread's heap calls as the shim records them: malloc/free pairs with
// some reallocs, addresses reused across threads' lifetimes.
std::vector<PtwEvent> program(uint32_t thread, size_t n, uint64_t tsc0) {
  std::mt19937_64 rng(thread * 7 + 1);
  std::vector<PtwEvent> v;
  std::vector<uint64_t> live;
  uint64_t next_addr = 0x7f0000000000ull + uint64_t(thread) * 0x100000000ull;
  for (size_t i = 0; i < n; ++i) {
    PtwEvent e;
    e.seq = uint32_t(i);
    e.tsc = tsc0 + i * 1000 + rng() % 200;  // threads 300 ticks apart: never within 100 ticks
    if (live.empty() || rng() % 3 != 0) {
      e.op = uint32_t(Op::malloc);
      e.a = next_addr;
      next_addr += 64;
      e.b = 1 + rng() % 5000;
      live.push_back(e.a);
    } else {
      const size_t k = rng() % live.size();
      e.op = uint32_t(Op::free);
      e.a = live[k];
      live[k] = live.back();
      live.pop_back();
    }
    v.push_back(e);
  }
  return v;
}

struct Decoded {
  PtImportReport report;
  normalise::NormaliseReport norm;
  std::vector<trace::Event> events;
  std::vector<std::pair<uint32_t, trace::ThreadInfo>> threads;
  uint64_t lost_markers = 0;
};

// The index of the first event that differs, or -1 (gtest would print
// whole vectors).
long first_difference(const std::vector<trace::Event>& x, const std::vector<trace::Event>& y) {
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
    if (!(x[i] == y[i])) return long(i);
  return x.size() == y.size() ? -1 : long(std::min(x.size(), y.size()));
}

Decoded decode(const std::string& perf_data, Decoder dec, const std::string& dir) {
  Decoded d;
  PtImportOptions opt;
  opt.decoder = dec;
  opt.dlfilter = dlfilter();
  const std::string sub = dir + "/" + decoder_name(dec);
  fs::create_directories(sub);
  std::string raw;
  d.report = decode_perf_pt(perf_data, sub, opt, &raw);
  normalise::RawFile rf(raw);
  normalise::NormaliseOptions no;
  d.norm = normalise::normalise(rf, sub + "/out.hlt", no);
  auto r = trace::TraceReader::open(sub + "/out.hlt");
  d.events = trace::testutil::read_all(*r);
  d.threads = r->thread_table();
  d.lost_markers = analysis::check_trace(*r).lost_events;
  return d;
}

std::vector<SynthThread> three_threads(size_t n) {
  std::vector<SynthThread> th(3);
  const char* names[] = {"main", "worker-1", "worker-2"};
  for (uint32_t t = 0; t < 3; ++t) {
    th[t].pid = 4242;
    th[t].tid = 4242 + t;
    th[t].comm = names[t];
    th[t].events = program(t, n, 5'000'000'000ull + t * 300);
    th[t].stream.psb_every = 64;
  }
  return th;
}

PerfSynthOptions options(bool pipe) {
  PerfSynthOptions o;
  o.pipe_mode = pipe;
  o.chunk_bytes = 4096;   // many AUXTRACE records per thread, cut anywhere in packets
  o.time.enabled = true;  // a 2.5 GHz TSC: 0.4 ns per tick
  o.time.shift = 10;
  o.time.mult = 410;
  o.time.zero = 123456789;
  return o;
}

// One recording, three decoders, one trace: every event, its thread and
// its time identical, and exactly the events that were recorded.
TEST(PtImport, ThreeDecodersGiveTheIdenticalTrace) {
  TempDir dir;
  const auto th = three_threads(3000);
  const std::string path = dir.path + "/perf.data";
  write(path, synth_perf_data(th, options(true)));
  const Decoded direct = decode(path, Decoder::direct, dir.path);
  EXPECT_EQ(direct.report.events, 9000u);
  EXPECT_EQ(direct.report.lost, 0u);
  EXPECT_EQ(direct.report.ptw_words, 45000u);
  EXPECT_EQ(direct.report.threads, 3u);
  EXPECT_EQ(direct.report.pid, 4242u);
  EXPECT_EQ(direct.norm.calls, 9000u);
  EXPECT_EQ(direct.lost_markers, 0u);
  ASSERT_EQ(direct.threads.size(), 3u);
  EXPECT_EQ(direct.threads[1].second.name, "worker-1");
  EXPECT_EQ(direct.threads[2].second.os_tid, 4244u);
  // Times: the payload TSC through AUXTRACE_INFO's conversion, from the first event.
  const TimeConv tc = options(true).time;
  const uint64_t t0 = tc.to_perf(th[0].events[0].tsc);
  uint64_t last_main = 0;
  for (const trace::Event& e : direct.events)
    if (e.thread == 0 && e.op != Op::thread_start && e.op != Op::thread_end) last_main = e.time;
  EXPECT_EQ(last_main, tc.to_perf(th[0].events.back().tsc) - t0);
  for (Decoder dec : {Decoder::dlfilter, Decoder::text}) {
    SCOPED_TRACE(decoder_name(dec));
    const Decoded other = decode(path, dec, dir.path);
    EXPECT_EQ(other.report.events, 9000u);
    EXPECT_EQ(other.report.ptw_words, 45000u);
    EXPECT_EQ(other.threads, direct.threads);
    EXPECT_EQ(other.events.size(), direct.events.size());
    EXPECT_EQ(first_difference(other.events, direct.events), -1);
  }
  // File mode (as `perf record -o` writes it) decodes the same.
  write(path + ".file", synth_perf_data(th, options(false)));
  const Decoded file = decode(path + ".file", Decoder::direct, dir.path + "/f");
  EXPECT_FALSE(file.report.pipe_mode);
  EXPECT_EQ(first_difference(file.events, direct.events), -1);
}

// Lost trace: an OVF packet inside an event of one thread, 5 KB of
// another's stream gone (an AUX record flagged truncated), 3 events
// missing whole from the third. Every decoder resynchronises, counts the
// same losses, writes them as `lost` markers, and keeps the rest exact.
TEST(PtImport, LostDataIsCountedTheSameByEveryDecoder) {
  TempDir dir;
  auto th = three_threads(2000);
  th[0].stream.ovf_before_word = {5 * 700 + 3};  // inside event 700
  th[1].dropped = {{30000, 35000}};
  th[2].events.erase(th[2].events.begin() + 100, th[2].events.begin() + 103);
  const std::string path = dir.path + "/perf.data";
  write(path, synth_perf_data(th, options(true)));
  const Decoded direct = decode(path, Decoder::direct, dir.path);
  EXPECT_EQ(direct.report.stream.overflows, 1u);
  EXPECT_EQ(direct.report.aux_truncated, 1u);
  EXPECT_EQ(direct.report.aux_gaps, 0u);  // the kernel's offsets go on over lost data
  // Thread 0 loses event 700; thread 1 what the 5 KB held and what follows
  // up to the next PSB (every 64 events); thread 2 three.
  const uint64_t lost1 = direct.report.lost - 1 - 3;
  EXPECT_GE(lost1, 5000u / 51);  // 5 PTW packets of 10 bytes per event, PSB+ in between
  EXPECT_LE(lost1, 5000u / 50 + 64 + 1);
  EXPECT_EQ(direct.report.events + direct.report.lost, 6000u - 3 + 3);
  EXPECT_EQ(direct.lost_markers, direct.report.lost);
  EXPECT_EQ(direct.norm.holes, direct.report.lost);
  for (Decoder dec : {Decoder::dlfilter, Decoder::text}) {
    SCOPED_TRACE(decoder_name(dec));
    const Decoded other = decode(path, dec, dir.path);
    EXPECT_EQ(other.report.lost, direct.report.lost);
    EXPECT_EQ(other.report.events, direct.report.events);
    const long k = first_difference(other.events, direct.events);
    EXPECT_EQ(k, -1);
    if (k >= 0 && getenv("PT_DEBUG"))
      for (long i = std::max(0l, k - 3); i < k + 3 && i < long(direct.events.size()); ++i)
        fprintf(stderr, "%ld: direct t%u op%u time %lu count %lu | other t%u op%u time %lu count %lu\n", i,
                direct.events[i].thread, unsigned(direct.events[i].op), direct.events[i].time, direct.events[i].count,
                other.events[i].thread, unsigned(other.events[i].op), other.events[i].time, other.events[i].count);
  }
}

// Per-cpu buffers (perf's default, the only way to trace threads started
// later): each CPU's stream mixes threads, which migrate every 37 events;
// the direct decoder gives each event to the thread the context-switch
// sideband says ran there then, and puts each thread's events in order.
TEST(PtImport, PerCpuBuffersGiveTheSameTraceAsPerThread) {
  TempDir dir;
  const auto th = three_threads(2000);
  const std::string per_thread = dir.path + "/thread.data", per_cpu = dir.path + "/cpu.data";
  write(per_thread, synth_perf_data(th, options(true)));
  PerfSynthOptions o = options(true);
  o.cpus = 2;
  o.migrate_every = 37;
  write(per_cpu, synth_perf_data(th, o));
  const Decoded a = decode(per_thread, Decoder::direct, dir.path + "/t");
  const Decoded b = decode(per_cpu, Decoder::direct, dir.path + "/c");
  EXPECT_TRUE(b.report.per_cpu);
  EXPECT_EQ(b.report.events, 6000u);
  EXPECT_EQ(b.report.lost, 0u);
  EXPECT_EQ(b.report.unattributed, 0u);
  EXPECT_EQ(b.threads, a.threads);
  EXPECT_EQ(first_difference(b.events, a.events), -1);
  // perf's own decoder attributes payloads by PT timing, which heaplab's
  // recordings keep coarse (no MTC): the perf script routes assemble per
  // CPU and attribute by the events' TSC instead, and agree exactly.
  for (Decoder dec : {Decoder::dlfilter, Decoder::text}) {
    SCOPED_TRACE(decoder_name(dec));
    const Decoded c = decode(per_cpu, dec, dir.path + "/c");
    EXPECT_EQ(c.report.events, 6000u);
    EXPECT_EQ(c.report.lost, 0u);
    EXPECT_EQ(c.threads, a.threads);
    EXPECT_EQ(first_difference(c.events, a.events), -1);
  }
}

// Per-cpu events are held until every CPU is decoded (40 bytes each): from
// 65,536 on, each doubling is checked against the memory available first.
TEST(PtImport, PerCpuEventsAreHeldAgainstTheMemoryAvailable) {
  TempDir dir;
  PerfSynthOptions o = options(true);
  o.cpus = 2;
  o.migrate_every = 37;
  const std::string path = dir.path + "/cpu.data";
  write(path, synth_perf_data(three_threads(22000), o));                    // 66,000 events
  setenv("HEAPLAB_MEMORY_AVAILABLE", std::to_string(5u << 20).c_str(), 1);  // 65,536 * 2 * 40 B is 5 MiB
  EXPECT_EQ(decode(path, Decoder::direct, dir.path + "/a").report.events, 66000u);
  setenv("HEAPLAB_MEMORY_AVAILABLE", std::to_string((5u << 20) - 1).c_str(), 1);
  std::string error;
  try {
    decode(path, Decoder::direct, dir.path + "/b");
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  unsetenv("HEAPLAB_MEMORY_AVAILABLE");
  EXPECT_EQ(error,
            "per-CPU PT buffers: 65536 events held so far to be put in order (40 bytes each until every CPU is "
            "decoded); twice that needs about 5 MiB, more than the 4 MiB this machine has available: record per "
            "thread (perf record --per-thread)");
}

// Events out of their numbering: one written before the one numbered just
// ahead of it (a signal handler that allocated between the shim numbering
// an event and writing it) finds its place; one that is not the thread's
// (per-cpu buffers: preempted and moved between its rdtsc and its ptwrites)
// is dropped without disturbing the thread's own events.
TEST(PtImport, OutOfOrderAndForeignEvents) {
  TempDir dir;
  const auto plain = three_threads(2000);
  auto th = plain;
  std::swap(th[0].events[50], th[0].events[51]);
  th[1].events.insert(th[1].events.begin() + 100, th[0].events[1500]);
  const std::string path = dir.path + "/perf.data";
  write(path, synth_perf_data(th, options(true)));
  write(path + ".plain", synth_perf_data(plain, options(true)));
  const Decoded want = decode(path + ".plain", Decoder::direct, dir.path + "/p");
  for (Decoder dec : {Decoder::direct, Decoder::text}) {
    SCOPED_TRACE(decoder_name(dec));
    const Decoded d = decode(path, dec, dir.path + "/o");
    EXPECT_EQ(d.report.events, 6000u);
    EXPECT_EQ(d.report.lost, 0u);
    EXPECT_EQ(d.report.misattributed, 1u);
    EXPECT_EQ(first_difference(d.events, want.events), -1);
  }
}

// Snapshot-mode recordings hold overlapping AUX data: decoded once.
TEST(PtImport, OverlappingAuxDataDecodesOnce) {
  TempDir dir;
  auto th = three_threads(2000);
  for (auto& t : th) t.overlap = 700;
  const std::string path = dir.path + "/perf.data";
  write(path, synth_perf_data(th, options(true)));
  write(path + ".plain", synth_perf_data(three_threads(2000), options(true)));
  const Decoded plain = decode(path + ".plain", Decoder::direct, dir.path + "/p");
  const Decoded d = decode(path, Decoder::direct, dir.path + "/o");
  EXPECT_GT(d.report.aux_overlaps, 10u);
  EXPECT_EQ(d.report.events, 6000u);
  EXPECT_EQ(d.report.lost, 0u);
  EXPECT_EQ(first_difference(d.events, plain.events), -1);
}

// A recording cut off mid-write (perf killed): what is there decodes.
TEST(PtImport, CutOffFileKeepsWhatIsThere) {
  TempDir dir;
  const auto th = three_threads(1000);
  std::vector<uint8_t> b = synth_perf_data(th, options(true));
  b.resize(b.size() * 2 / 3);
  const std::string path = dir.path + "/perf.data";
  write(path, b);
  const Decoded d = decode(path, Decoder::direct, dir.path);
  EXPECT_GT(d.report.file_truncated_at, 0u);
  EXPECT_GT(d.report.events, 1000u);
  EXPECT_LT(d.report.events, 3000u);
}

std::string error_of(const std::string& path, Decoder dec, const std::string& dir, const std::string& perf = "perf") {
  PtImportOptions opt;
  opt.decoder = dec;
  opt.dlfilter = dlfilter();
  opt.perf = perf;
  std::string raw;
  try {
    decode_perf_pt(path, dir, opt, &raw);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PtImport, BadInputGetsOneLine) {
  TempDir dir;
  const std::string junk = dir.path + "/junk.data";
  write(junk, std::vector<uint8_t>(100, 'x'));
  EXPECT_EQ(error_of(junk, Decoder::direct, dir.path), junk + ": not a perf.data file (no PERFILE2 magic)");
  EXPECT_EQ(error_of(dir.path + "/none", Decoder::direct, dir.path), dir.path + "/none: No such file or directory");
  // A perf.data without PT data.
  std::vector<uint8_t> empty = {'P', 'E', 'R', 'F', 'I', 'L', 'E', '2', 16, 0, 0, 0, 0, 0, 0, 0};
  const std::string nopt = dir.path + "/nopt.data";
  write(nopt, empty);
  EXPECT_EQ(error_of(nopt, Decoder::direct, dir.path), nopt + ": no Intel PT data in it (no AUXTRACE_INFO record)");
  // perf record -z.
  std::vector<uint8_t> z = empty;
  const uint8_t rec[8] = {81, 0, 0, 0, 0, 0, 16, 0};
  z.insert(z.end(), rec, rec + 8);
  z.resize(z.size() + 8);
  write(nopt, z);
  EXPECT_EQ(error_of(nopt, Decoder::direct, dir.path),
            nopt +
                ": at byte 16: compressed records (perf record -z): not supported; record without -z, or "
                "`perf inject -i IN -o OUT` to decompress");
  // No perf for the perf script routes.
  const std::string good = dir.path + "/perf.data";
  write(good, synth_perf_data(three_threads(10), options(true)));
  EXPECT_EQ(error_of(good, Decoder::text, dir.path, "/nonexistent/perf"),
            "cannot run /nonexistent/perf: No such file or directory (the dlfilter and text decoders need perf: "
            "apt-get install linux-perf)");
  PtImportOptions opt;
  opt.decoder = Decoder::dlfilter;
  opt.dlfilter = dir.path + "/missing.so";
  std::string raw;
  try {
    decode_perf_pt(good, dir.path, opt, &raw);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()), "the dlfilter library " + dir.path +
                                         "/missing.so is missing (it is built next to heaplab as "
                                         "libheaplab_ptw_dlfilter.so)");
  }
}

}  // namespace
}  // namespace heaplab::pt
