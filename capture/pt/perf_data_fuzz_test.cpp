// Runs the perf.data reader's fuzz target over synthetic recordings (pipe
// and file mode, per-thread and per-cpu buffers, lost data, every sideband
// record the reader keeps) and deterministic mutations of them, in every
// build (the sanitizer build included), so that ctest exercises the entry
// point and the reader's bounds checks.
// HEAPLAB_FUZZ_SEED_DIR=DIR writes the seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/pt/perf_data.h"
#include "capture/pt/pt_synth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::pt {
namespace {

namespace testutil = trace::testutil;

std::vector<PtwEvent> events(uint32_t thread, size_t n) {
  std::mt19937_64 rng(thread + 1);
  std::vector<PtwEvent> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i].op = uint32_t(rng() % 30);
    v[i].seq = uint32_t(i);
    v[i].a = 0x7f0000000000ull + (rng() % (1u << 20)) * 16;
    v[i].b = rng() % 5000;
    v[i].tsc = 5'000'000'000ull + i * 1000 + thread * 300;
  }
  return v;
}

std::vector<SynthThread> threads() {
  std::vector<SynthThread> th(2);
  for (uint32_t t = 0; t < 2; ++t) {
    th[t].pid = 4242;
    th[t].tid = 4242 + t;
    th[t].comm = t == 0 ? "main" : "worker";
    th[t].events = events(t, 60);
    th[t].stream.psb_every = 16;
  }
  return th;
}

PerfSynthOptions options(bool pipe, uint32_t cpus) {
  PerfSynthOptions o;
  o.pipe_mode = pipe;
  o.chunk_bytes = 512;
  o.time.enabled = true;
  o.time.shift = 10;
  o.time.mult = 410;
  o.time.zero = 123456789;
  o.cpus = cpus;
  o.migrate_every = 7;
  return o;
}

template <class T>
void append(std::vector<uint8_t>& v, const T& x) {
  const auto* p = reinterpret_cast<const uint8_t*>(&x);
  v.insert(v.end(), p, p + sizeof x);
}

// A record: header, body, then a sample_id trailer for attr 1 (TID, TIME,
// CPU, IDENTIFIER) or attr 2 (TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER).
void record(std::vector<uint8_t>& out, uint32_t type, uint16_t misc, const std::vector<uint8_t>& body,
            uint64_t attr_id = 0) {
  std::vector<uint8_t> id;
  if (attr_id != 0) {
    append(id, uint32_t{4242});
    append(id, uint32_t{4243});
    append(id, uint64_t{5'000'000'500ull});
    if (attr_id == 2) {
      append(id, uint64_t{2});
      append(id, uint64_t{2});
    }
    append(id, uint32_t{1});
    append(id, uint32_t{0});
    append(id, attr_id);
  }
  const perf_event_header h{type, misc, uint16_t(sizeof(perf_event_header) + body.size() + id.size())};
  append(out, h);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), id.begin(), id.end());
}

// A pipe-mode recording followed by the records synth_perf_data does not
// write: a second attr (found by its id), FORK, EXIT, an exec COMM,
// ITRACE_START, SWITCH in and out, AUX flagged partial, LOST,
// AUXTRACE_ERROR, FINISHED_ROUND and a record type the reader skips.
std::vector<uint8_t> with_sideband() {
  std::vector<uint8_t> b = synth_perf_data(threads(), options(true, 0));
  {
    perf_event_attr a{};
    a.type = 10;
    a.size = PERF_ATTR_SIZE_VER7;
    a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU |
                    PERF_SAMPLE_IDENTIFIER;
    a.sample_id_all = 1;
    std::vector<uint8_t> body;
    append(body, a);
    append(body, uint64_t{2});
    record(b, kRecordHeaderAttr, 0, body);
  }
  for (uint32_t type : {uint32_t(PERF_RECORD_FORK), uint32_t(PERF_RECORD_EXIT)}) {
    std::vector<uint8_t> body;
    for (uint32_t x : {4242u, 1u, 4244u, 4242u}) append(body, x);
    append(body, uint64_t{5'000'000'100ull});
    record(b, type, 0, body, 1);
  }
  {
    std::vector<uint8_t> body;
    append(body, uint32_t{4242});
    append(body, uint32_t{4244});
    const char name[16] = "exec-name";
    body.insert(body.end(), name, name + sizeof name);
    record(b, PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC, body, 2);
  }
  {
    std::vector<uint8_t> body;
    append(body, uint32_t{4242});
    append(body, uint32_t{4243});
    record(b, PERF_RECORD_ITRACE_START, 0, body, 1);
    record(b, PERF_RECORD_SWITCH, 0, {}, 2);
    record(b, PERF_RECORD_SWITCH, PERF_RECORD_MISC_SWITCH_OUT, {}, 1);
    record(b, PERF_RECORD_SWITCH_CPU_WIDE, PERF_RECORD_MISC_SWITCH_OUT, body, 2);
  }
  {
    std::vector<uint8_t> body;
    append(body, uint64_t{0});
    append(body, uint64_t{4096});
    append(body, uint64_t{PERF_AUX_FLAG_PARTIAL});
    record(b, PERF_RECORD_AUX, 0, body, 1);
  }
  {
    std::vector<uint8_t> body;
    append(body, uint64_t{1});
    append(body, uint64_t{17});
    record(b, PERF_RECORD_LOST, 0, body, 1);
    record(b, kRecordAuxtraceError, 0, std::vector<uint8_t>(16, 0));
    record(b, kRecordFinishedRound, 0, {});
    record(b, 200, 0, std::vector<uint8_t>(8, 0x5a));
  }
  return b;
}

std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  for (bool pipe : {true, false})
    for (uint32_t cpus : {0u, 2u}) out.push_back(synth_perf_data(threads(), options(pipe, cpus)));
  // Lost data (an AUX record flagged truncated) and overlapping snapshots.
  auto th = threads();
  th[0].dropped = {{700, 1000}};
  th[1].overlap = 100;
  out.push_back(synth_perf_data(th, options(true, 0)));
  out.push_back(with_sideband());
  return out;
}

void run(const std::vector<uint8_t>& in) { LLVMFuzzerTestOneInput(in.data(), in.size()); }

// The seeds are read whole, so that their mutations reach every record kind.
TEST(PerfDataFuzz, SeedsAreValid) {
  testutil::TempDir dir;
  const char* corpus = std::getenv("HEAPLAB_FUZZ_SEED_DIR");
  int k = 0;
  for (const std::vector<uint8_t>& seed : seeds()) {
    const std::string bytes(seed.begin(), seed.end());
    const std::string path = dir.file("seed.data");
    testutil::write_file(path, bytes);
    if (corpus && *corpus) testutil::write_file(std::string(corpus) + "/perf-data-" + std::to_string(k), bytes);
    ++k;
    const PerfDataFile f(path);
    EXPECT_TRUE(f.data().have_info);
    EXPECT_GT(f.data().chunks.size(), 4u);
    EXPECT_EQ(f.truncated_at(), 0u);
  }
  const PerfDataFile f(dir.file("seed.data"));  // the last: with the sideband
  EXPECT_EQ(f.data().attrs.size(), 2u);
  EXPECT_EQ(f.data().tasks.size(), 2u);
  EXPECT_EQ(f.data().switches.size(), 4u);
  EXPECT_EQ(f.data().aux.size(), 1u);
  EXPECT_EQ(f.data().lost_records, 17u);
  EXPECT_EQ(f.data().auxtrace_errors, 1u);
  ASSERT_EQ(f.data().comms.size(), 3u);
  EXPECT_TRUE(f.data().comms[2].exec);
}

TEST(PerfDataFuzz, SeedsAndMutations) {
  std::mt19937_64 rng(1234);
  // Values that make sizes, offsets and counts interesting.
  const uint64_t interesting[] = {0, 1, 7, 8, 16, 63, 64, 104, 0xffff, 0x10000, ~uint64_t{0}, uint64_t{1} << 63};
  for (const std::vector<uint8_t>& seed : seeds()) {
    run(seed);
    for (int i = 0; i < 1500; ++i) {
      std::vector<uint8_t> m = seed;
      const int kind = static_cast<int>(rng() % 5);
      const size_t pos = rng() % m.size();
      if (kind == 0) {
        m[pos] = static_cast<uint8_t>(rng());
      } else if (kind == 1) {
        for (size_t j = 0; j < 8 && pos + j < m.size(); ++j) m[pos + j] = static_cast<uint8_t>(rng());
      } else if (kind == 2) {
        m.resize(pos);
      } else if (kind == 3 && rng() % 2 == 0) {
        m.insert(m.begin() + long(pos), 1 + rng() % 16, static_cast<uint8_t>(rng()));
      } else if (kind == 3) {
        // Splice: a run of the seed copied to an 8-byte boundary (records
        // repeated, or a record's head joined to another's tail).
        const size_t from = rng() % seed.size();
        const size_t n = std::min<size_t>(8 + rng() % 120, seed.size() - from);
        m.insert(m.begin() + long(pos & ~size_t{7}), seed.begin() + long(from), seed.begin() + long(from + n));
      } else {
        // Records are 8-byte aligned: a size, offset or count field.
        const size_t at = pos & ~size_t{7};
        uint64_t v = interesting[rng() % std::size(interesting)];
        if (rng() % 4 == 0) v = m.size() - at + (rng() % 16) - 8;
        const size_t n = std::min<size_t>(8, m.size() - at);
        std::memcpy(m.data() + at, &v, n);
      }
      run(m);
    }
  }
}

}  // namespace
}  // namespace heaplab::pt
