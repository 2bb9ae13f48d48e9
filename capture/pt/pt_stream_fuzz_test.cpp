// Runs the PT stream decoder's fuzz target over synthetic PT streams
// (libipt-encoded ptwrite events, with FUPs, overflows, junk and 32-bit
// payloads), payload words for the assembler alone, and deterministic
// mutations of them, in every build (the sanitizer build included), so that
// ctest exercises the entry point.
// HEAPLAB_FUZZ_SEED_DIR=DIR writes the seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/pt/pt_stream.h"
#include "capture/pt/pt_synth.h"
#include "capture/shim/ptw_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::pt {
namespace {

std::vector<PtwEvent> events(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<PtwEvent> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i].op = uint32_t(rng() % 30);
    v[i].seq = uint32_t(i);
    v[i].a = 0x7f0000000000ull + (rng() % (1u << 30)) * 16;
    v[i].b = rng() % 100000;
    v[i].c = i % 7 == 0 ? rng() : 0;
    v[i].tsc = 1000000 + i * 37;
  }
  v[n / 2].c = kMagic << 48 | 0x123456789aull;  // a field word that looks like a header
  return v;
}

std::vector<uint8_t> with_control(uint8_t ctl, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> s(1, ctl);
  s.insert(s.end(), body.begin(), body.end());
  return s;
}

std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  const std::vector<PtwEvent> ev = events(80, 1);
  // Stream mode: one piece, and 2 to 4 pieces with cuts moved anywhere.
  out.push_back(with_control(0x00, encode_ptw_stream(ev, {16, {}, false})));
  out.push_back(with_control(0x01 | 3 << 3, encode_ptw_stream(ev, {16, {}, true})));  // FUPs, 2 pieces
  out.push_back(with_control(0x02 | 12 << 3, encode_ptw_stream(ev, {8, {5 * 20 + 2, 5 * 50}, false})));  // OVFs
  {
    std::vector<uint8_t> b(37, 0x55);  // junk before the first PSB
    const std::vector<uint8_t> s = encode_ptw_stream(events(40, 2), {0, {}, false});
    b.insert(b.end(), s.begin(), s.end());
    const uint8_t ptw32[] = {0x02, 0x12, 0x78, 0x56, 0x34, 0x12};  // a 32-bit payload
    b.insert(b.end(), ptw32, ptw32 + sizeof ptw32);
    out.push_back(with_control(0x03 | 7 << 3, b));
  }
  {
    std::vector<uint8_t> s = encode_ptw_stream(events(60, 3), {16, {}, false});
    s.erase(s.begin() + 400, s.begin() + 1100);   // lost bytes: resynchronise
    out.push_back(with_control(0x04 | 0x01, s));  // the first piece starts in sync
  }
  // Assembler mode: each event's five words, with losses and 32-bit payloads between.
  {
    std::vector<uint8_t> b(1, 0x80);
    const auto put = [&](uint8_t ctl, uint64_t w) {
      b.push_back(ctl);
      const auto* p = reinterpret_cast<const uint8_t*>(&w);
      b.insert(b.end(), p, p + 8);
    };
    const std::vector<PtwEvent> e = events(40, 4);
    for (size_t i = 0; i < e.size(); ++i) {
      if (i == 10 || i == 25) continue;  // missing whole
      const PtwEvent& x = e[i];
      const uint64_t w[5] = {header_word(x.op, x.seq, x.tsc, x.a, x.b, x.c), x.tsc, x.a, x.b, x.c};
      for (unsigned k = 0; k < 5; ++k) {
        if (i == 17 && k == 2) continue;  // a word lost
        put(i == 30 && k == 0 ? 1 : i == 33 && k == 3 ? 2 : 0, w[k]);
      }
    }
    put(3, 0);
    out.push_back(b);
  }
  return out;
}

void run(const std::vector<uint8_t>& in) { LLVMFuzzerTestOneInput(in.data(), in.size()); }

// The stream seeds decode to events, so that their mutations reach the
// assembler.
TEST(PtStreamFuzz, SeedsDecode) {
  for (const std::vector<uint8_t>& seed : seeds()) {
    if (seed[0] & 0x80) continue;  // the assembler's words
    PtwAssembler a;
    StreamStats st;
    const auto ignore = [](const PtwEvent&) {};
    decode_stream(seed.data() + 1, seed.size() - 1, a, ignore, st, false, false);
    EXPECT_GE(a.events(), 30u);
  }
}

TEST(PtStreamFuzz, SeedsAndMutations) {
  std::mt19937_64 rng(1234);
  const char* corpus = std::getenv("HEAPLAB_FUZZ_SEED_DIR");
  int k = 0;
  for (const std::vector<uint8_t>& seed : seeds()) {
    if (corpus && *corpus)
      trace::testutil::write_file(std::string(corpus) + "/pt-stream-" + std::to_string(k++),
                                  std::string(seed.begin(), seed.end()));
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
      } else if (kind == 3) {
        m.insert(m.begin() + long(pos), 1 + rng() % 16, static_cast<uint8_t>(rng()));
      } else {
        // Splice: a run of the seed copied elsewhere in it (whole packets
        // repeated, or a packet's head joined to another's tail).
        const size_t from = rng() % seed.size();
        const size_t n = std::min<size_t>(1 + rng() % 64, seed.size() - from);
        m.insert(m.begin() + long(pos), seed.begin() + long(from), seed.begin() + long(from + n));
      }
      if (!m.empty() && i % 3 == 0) m[0] = static_cast<uint8_t>((m[0] & 0x80) | (rng() & 0x7f));  // other cuts
      run(m);
    }
  }
}

}  // namespace
}  // namespace heaplab::pt
