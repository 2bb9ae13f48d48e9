// Runs the normaliser's fuzz target over structured seeds and deterministic
// mutations of them in every build (the sanitizer build included), so that
// ctest exercises the entry point; scripts/fuzz.sh runs it under libFuzzer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/shim/raw_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using heaplab::trace::Op;
namespace raw = heaplab::raw;

void put_record(std::string& s, uint32_t op, uint64_t ticks, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  raw::Record r{raw::record_head(op, ticks), a, b, c};
  s.append(reinterpret_cast<const char*>(&r), sizeof r);
}

// Two threads with allocations, cross-thread frees, reallocs and a hole,
// split over mapped and appended blocks.
std::string seed() {
  std::string s;
  s.push_back(char(2 | (1 << 2)));  // .blocks, 2 threads, monotonic clock
  uint64_t start = 1000;
  s.append(reinterpret_cast<const char*>(&start), 8);
  auto block = [&](uint8_t sel, std::vector<std::string> recs) {
    s.push_back(char(sel));
    s.push_back(char(recs.size()));
    for (auto& r : recs) s += r;
  };
  auto rec = [](uint32_t op, uint64_t t, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
    std::string r;
    put_record(r, op, t, a, b, c);
    return r;
  };
  block(0 | 4, {rec(uint32_t(Op::malloc), 1010, 0x1000, 16), rec(uint32_t(Op::calloc), 1011, 0x2000, 8, 4),
                rec(raw::kRawReallocBegin, 1012, 0x1000, 64), rec(uint32_t(Op::realloc), 1013, 0x3000, 0x1000, 64)});
  block(0 | (1 << 3),
        {rec(uint32_t(Op::free), 1020, 0x3000), std::string(32, '\0'), rec(uint32_t(Op::op_new), 1022, 0x4000, 24)});
  block(1, {rec(uint32_t(Op::free), 1015, 0x2000), rec(uint32_t(Op::op_delete_sized), 1030, 0x4000, 24),
            rec(uint32_t(Op::malloc), 1031, 0x1000, 8)});
  return s;
}

// Found by scripts/fuzz.sh: a record stamped so far from the start that its
// time in ns did not fit 64 bits (a double converted out of range, undefined).
TEST(NormaliseFuzz, ClockFarFromTheStart) {
  const std::string input(
      "\x1e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x1e\xb7\xb7\xb7\xb7\xb7\xb7\xb7\xb7\xb7\x93\xb7\xb7\xb7"
      "\xb7\xb7\xb7\xb7\xb7\x93\xb7\x93\x93\x93\x93\x93\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
      "\xff\xff\xff\xff\xff\xff\xff\xff"
      "\x1f\xff\xff\xff\xff\xff\xff\xff\xe7\xff\xe7\xff\xf7\xff\xff\xe7\xe7\xe7\xe7\xff\xff\x1e",
      86);
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

// The seed read three ways: finished (RawFile), live, and live consuming
// (LiveRawFile, as heaplab capture reads a running program's files).
TEST(NormaliseFuzz, SeedsAndMutationsNeverCrash) {
  for (const int live : {0, 16, 16 | 32}) {
    std::string base = seed();
    base[0] = char(base[0] | live);
    // (The target's scratch directory: /dev/shm, else /tmp.)
    const std::string out = std::string(std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp") +
                            "/heaplab-normalise-fuzz-" + std::to_string(getpid()) + "/out.hlt";
    std::filesystem::remove(out);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(base.data()), base.size());
    // The same calls whichever way it is read (the live reader also counts
    // the unwritten tail of an appended block, which the shim appends only
    // full, as lost).
    uint64_t calls = 0;
    for (const auto& e : heaplab::trace::testutil::read_all(*heaplab::trace::TraceReader::open(out)))
      calls += e.op != Op::lost;
    EXPECT_EQ(calls, 12u) << live;
    std::mt19937_64 rng(42 + uint64_t(live));
    for (int i = 0; i < 400; ++i) {
      std::string m = base;
      int edits = 1 + int(rng() % 8);
      for (int e = 0; e < edits; ++e) {
        size_t at = rng() % m.size();
        switch (rng() % 3) {
          case 0:
            m[at] = char(rng());
            break;
          case 1:
            m.erase(at, 1 + rng() % 40);
            break;
          default:
            m.insert(at, std::string(1 + rng() % 40, char(rng())));
        }
        if (m.empty()) m = base;
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(m.data()), m.size());
    }
  }
}

}  // namespace
