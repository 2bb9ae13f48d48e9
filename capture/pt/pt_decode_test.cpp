// The ptwrite route without PT hardware: heap events encoded into PT
// streams with libipt's encoder (pt_synth), decoded back with its packet
// decoder (pt_stream) and reassembled (ptw_assembler): exact round trips,
// and every kind of loss resynchronised and counted.
#include <gtest/gtest.h>

#include <random>

#include "capture/pt/pt_stream.h"
#include "capture/pt/pt_synth.h"
#include "capture/shim/ptw_format.h"

namespace heaplab::pt {
namespace {

std::vector<PtwEvent> make_events(size_t n, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<PtwEvent> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i].op = uint32_t(rng() % 30);
    v[i].seq = uint32_t(i);
    v[i].a = 0x7f0000000000ull + (rng() % (1u << 30)) * 16;
    v[i].b = rng() % 100000;
    v[i].c = i % 7 == 0 ? rng() : 0;  // sometimes any 64-bit value, also one that looks like a header
    v[i].tsc = 1000000 + i * 37;
  }
  v[n / 2].c = kMagic << 48 | 0x123456789aull;
  return v;
}

struct Decoded {
  std::vector<PtwEvent> events;
  PtwLosses losses;
  StreamStats stats;
};

Decoded decode(const std::vector<uint8_t>& bytes) {
  Decoded d;
  PtwAssembler a;
  decode_stream(
      bytes.data(), bytes.size(), a, [&](const PtwEvent& e) { d.events.push_back(e); }, d.stats);
  d.losses = a.losses();
  return d;
}

bool same(const PtwEvent& x, const PtwEvent& y) {
  return x.op == y.op && x.seq == y.seq && x.a == y.a && x.b == y.b && x.c == y.c && x.tsc == y.tsc;
}

TEST(PtwFormat, HeaderWords) {
  const uint64_t h = header_word(17, 0xdeadbeef, 9, 1, 2, 3);
  EXPECT_TRUE(is_header(h));
  EXPECT_EQ(header_op(h), 17u);
  EXPECT_EQ(header_seq(h), 0xdeadbeefu);
  EXPECT_EQ(header_check(h), check_byte(9, 1, 2, 3, 0xdeadbeef));
  EXPECT_NE(check_byte(9, 1, 2, 3, 0), check_byte(9, 1, 2, 4, 0));
  EXPECT_NE(check_byte(9, 1, 2, 3, 0), check_byte(8, 1, 2, 3, 0));
  // No user-space address (below 2^47) looks like a header.
  EXPECT_FALSE(is_header(0x00007fffffffffffull));
}

TEST(PtwAssembler, CutMissingAndStrayWords) {
  std::vector<PtwEvent> out;
  const auto sink = [&](const PtwEvent& e) { out.push_back(e); };
  PtwAssembler a;
  const auto put = [&](uint32_t op, uint32_t seq, uint64_t x, uint64_t y, uint64_t z, unsigned words = 5) {
    const uint64_t w[5] = {header_word(op, seq, 100 + seq, x, y, z), 100 + seq, x, y, z};
    for (unsigned i = 0; i < words; ++i) a.word(w[i], sink);
  };
  put(0, 0, 10, 20, 30);
  put(1, 1, 11, 21, 31, 3);  // cut: the next header comes after three words, taken as
  put(2, 2, 12, 22, 32);     // the last field; the check fails, decoding restarts there
  put(3, 5, 13, 23, 33);     // seq 3 and 4 missing whole
  a.word(99, sink);          // a word outside any event
  put(4, 6, 14, 24, 34, 3);
  a.lost();  // an OVF: the check byte decides (the next header comes early)
  put(5, 7, 15, 25, 35);
  // A corrupted field: the check byte catches it.
  a.word(header_word(6, 8, 108, 16, 26, 36), sink);
  a.word(108, sink);
  a.word(16, sink);
  a.word(27, sink);
  a.word(36, sink);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[1].op, 2u);
  EXPECT_EQ(out[2].seq, 5u);
  EXPECT_EQ(out[3].c, 35u);
  EXPECT_EQ(out[3].tsc, 107u);
  EXPECT_EQ(a.losses().cut, 3u);
  EXPECT_EQ(a.losses().missing, 4u);  // 1 and 6 (cut, so gaps too), 3 and 4; 8 is not followed by anything
  EXPECT_EQ(a.losses().total(), 4u);
  EXPECT_EQ(a.losses().stray, 1u);
  EXPECT_EQ(a.events(), 4u);
}

// 10,000 events through libipt and back: every field and time exact.
TEST(PtStream, RoundTripThroughLibipt) {
  const std::vector<PtwEvent> ev = make_events(10000);
  const std::vector<uint8_t> bytes = encode_ptw_stream(ev, {100, {}, false});
  const Decoded d = decode(bytes);
  ASSERT_EQ(d.events.size(), ev.size());
  for (size_t i = 0; i < ev.size(); ++i) ASSERT_TRUE(same(d.events[i], ev[i])) << i;
  EXPECT_EQ(d.losses.total(), 0u);
  EXPECT_EQ(d.losses.stray, 0u);
  EXPECT_EQ(d.stats.psb, 100u);
  EXPECT_EQ(d.stats.ptw, 50000u);
  EXPECT_EQ(d.stats.skipped_bytes, 0u);
  // With fup_on_ptw the FUPs between the PTWs change nothing.
  const Decoded f = decode(encode_ptw_stream(ev, {100, {}, true}));
  ASSERT_EQ(f.events.size(), ev.size());
  EXPECT_TRUE(same(f.events.back(), ev.back()));
}

// OVF packets: the event they fall into is dropped and counted, the next
// one decodes; an OVF between events costs nothing.
TEST(PtStream, OverflowCutsOneEvent) {
  const std::vector<PtwEvent> ev = make_events(1000);
  // The hardware lost a field word of event 50 and the header of event 700.
  const Decoded d = decode(encode_ptw_stream(ev, {64, {5 * 50 + 2, 5 * 700}, false}));
  EXPECT_EQ(d.stats.overflows, 2u);
  EXPECT_EQ(d.losses.cut, 1u);    // event 50: begun, failed its check
  EXPECT_EQ(d.losses.stray, 4u);  // event 700's fields, without their header
  EXPECT_EQ(d.losses.missing, 2u);
  EXPECT_EQ(d.losses.total(), 2u);
  ASSERT_EQ(d.events.size(), 998u);
  EXPECT_TRUE(same(d.events[49], ev[49]));
  EXPECT_TRUE(same(d.events[50], ev[51]));
  EXPECT_TRUE(same(d.events[698], ev[699]));
  EXPECT_TRUE(same(d.events[699], ev[701]));
  EXPECT_TRUE(same(d.events.back(), ev.back()));
}

// Bytes lost from the middle (a truncated AUX buffer): decoding picks up
// at the next pair of PTW packets (or PSB); what was lost is counted,
// never invented.
TEST(PtStream, LostBytesResynchroniseAtTheNextPsb) {
  const std::vector<PtwEvent> ev = make_events(2000, 7);
  const std::vector<uint8_t> whole = encode_ptw_stream(ev, {100, {}, false});
  for (size_t shift = 0; shift < 40; ++shift) {  // gaps starting and ending anywhere in a packet
    SCOPED_TRACE(shift);
    std::vector<uint8_t> bytes = whole;
    const size_t from = bytes.size() / 3 + shift * 7, to = from + 3000 + shift;
    bytes.erase(bytes.begin() + long(from), bytes.begin() + long(to));
    const Decoded d = decode(bytes);
    EXPECT_GT(d.losses.total(), 0u);
    EXPECT_LT(d.events.size(), ev.size());
    // Every event decoded is one of the originals, in order, exact, time
    // included (it travels in the payload).
    size_t j = 0;
    size_t flagged = 0;
    for (const PtwEvent& e : d.events) {
      while (j < ev.size() && ev[j].seq != e.seq) ++j;
      ASSERT_LT(j, ev.size()) << "an event that was never encoded: seq " << e.seq;
      const PtwEvent& want = ev[j];
      flagged += e.after_gap;
      EXPECT_TRUE(same(e, want)) << e.seq << ": op " << e.op << "/" << ev[j].op << " a " << e.a << "/" << ev[j].a
                                 << " b " << e.b << "/" << ev[j].b << " c " << e.c << "/" << ev[j].c << " tsc " << e.tsc
                                 << "/" << ev[j].tsc;
    }
    // Decoded and lost add up exactly: nothing is both, nothing neither.
    EXPECT_EQ(d.events.size() + d.losses.total(), ev.size());
    EXPECT_TRUE(same(d.events.back(), ev.back()));
    EXPECT_EQ(flagged, 1u);
  }
}

// Garbage before the first PSB is skipped; 32-bit payloads are not ours.
TEST(PtStream, SkipsWhatIsNotOurs) {
  const std::vector<PtwEvent> ev = make_events(300);
  std::vector<uint8_t> bytes = encode_ptw_stream(ev, {100, {}, false});
  std::vector<uint8_t> junk(77, 0x55);
  bytes.insert(bytes.begin(), junk.begin(), junk.end());
  // A 32-bit PTW packet (plc = 0) at the end.
  const uint8_t ptw32[] = {0x02, 0x12, 0x78, 0x56, 0x34, 0x12};
  bytes.insert(bytes.end(), ptw32, ptw32 + sizeof ptw32);
  const Decoded d = decode(bytes);
  EXPECT_EQ(d.events.size(), ev.size());
  EXPECT_EQ(d.stats.skipped_bytes, 77u);
  EXPECT_EQ(d.losses.short_words, 1u);
  EXPECT_EQ(d.losses.total(), 0u);
}

}  // namespace
}  // namespace heaplab::pt
