// Fuzz target for the PT packet stream decoder (decode_stream) and the
// ptwrite event reassembly (PtwAssembler). Crashes, sanitizer reports,
// hangs and a broken invariant (checked below, abort()) are bugs; the
// decoder has no error to throw on bad bytes (it skips them and counts).
//   input: byte 0 bit 7 = 0: PT bytes follow, decoded twice with one
//            assembler each: whole, and in pieces as AUXTRACE chunks are
//            (a packet cut at a piece's end carried into the next);
//            bits 0-1 pieces - 1, bit 2 the first piece starts in sync,
//            bits 3-6 move cut k by k * (-8..7) bytes
//          byte 0 bit 7 = 1: 9-byte frames for the assembler alone: a
//            control byte (bits 0-1: 0 a word, 1 a loss then a word,
//            2 a 32-bit payload then a word, 3 a loss only), then the
//            64-bit payload word, little-endian
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "capture/pt/pt_stream.h"
#include "capture/pt/ptw_assembler.h"

namespace {

using heaplab::pt::PtwAssembler;
using heaplab::pt::PtwEvent;
using heaplab::pt::StreamEnd;
using heaplab::pt::StreamStats;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "pt_stream_fuzz: broken invariant: %s\n", what);
  std::abort();
}

// What the assembler hands out: in its thread's numbering, with the gaps
// counted as missing and flagged on the event after them.
struct EventCheck {
  uint64_t events = 0;
  uint64_t gaps = 0;
  bool seen = false;
  uint32_t last = 0;
  void operator()(const PtwEvent& e) {
    check(e.op <= 0xff, "event op wider than the header's 8 bits");
    const uint32_t gap = seen ? uint32_t(e.seq - last - 1) : e.seq;
    check(gap == 0 || e.after_gap, "event after a sequence gap not flagged after_gap");
    gaps += gap;
    seen = true;
    last = e.seq;
    ++events;
  }
  void done(const PtwAssembler& a) const {
    check(a.events() == events, "assembler's event count differs from the events handed out");
    check(a.losses().missing == gaps, "missing events differ from the sequence gaps");
    check(a.losses().total() == a.losses().missing, "total losses are not the missing events");
  }
};

void check_stats(const StreamStats& s, uint64_t len) {
  check(s.bytes == len, "stream stats do not count every byte");
  check(s.skipped_bytes <= len, "more bytes skipped than decoded");
  check(s.ptw <= s.packets && s.psb <= s.packets && s.overflows <= s.packets, "packet counts");
}

void assembler_only(const uint8_t* data, size_t size) {
  PtwAssembler a;
  EventCheck ev;
  uint64_t shorts = 0;
  for (size_t at = 0; at + 9 <= size; at += 9) {
    const unsigned ctl = data[at] & 3u;
    uint64_t w;
    std::memcpy(&w, data + at + 1, 8);
    if (ctl == 1 || ctl == 3) a.lost();
    if (ctl == 2) {
      a.short_word();
      ++shorts;
    }
    if (ctl != 3) a.word(w, ev);
  }
  ev.done(a);
  check(a.losses().short_words == shorts, "32-bit payloads miscounted");
}

void stream(uint8_t ctl, const uint8_t* data, size_t len) {
  const bool synced = ctl & 4u;
  // Whole, from an exact-size copy (reads past the end are reported).
  {
    const std::vector<uint8_t> buf(data, data + len);
    PtwAssembler a;
    EventCheck ev;
    StreamStats st;
    const StreamEnd e = heaplab::pt::decode_stream(
        buf.data(), buf.size(), a, [&](const PtwEvent& x) { ev(x); }, st, synced, false);
    check(e.stopped == len, "a stream that does not continue stopped short");
    check_stats(st, len);
    ev.done(a);
  }
  // In pieces, as pt_import decodes AUXTRACE chunks: each piece continues
  // the stream; a packet cut at its end is carried into the next one.
  const size_t pieces = 1 + (ctl & 3u);
  const long jitter = long((ctl >> 3) & 15u) - 8;
  std::vector<size_t> cuts;
  size_t prev = 0;
  for (size_t k = 1; k < pieces; ++k) {
    const long want = long(len * k / pieces) + jitter * long(k);
    const size_t cut = size_t(std::clamp(want, long(prev), long(len)));
    cuts.push_back(cut);
    prev = cut;
  }
  cuts.push_back(len);
  PtwAssembler a;
  EventCheck ev;
  StreamStats st;
  bool in_sync = synced;
  std::vector<uint8_t> carry;
  size_t from = 0;
  for (size_t k = 0; k < cuts.size(); ++k) {
    std::vector<uint8_t> buf(carry);
    buf.insert(buf.end(), data + from, data + cuts[k]);
    from = cuts[k];
    const bool more = k + 1 < cuts.size();
    const StreamEnd e = heaplab::pt::decode_stream(
        buf.data(), buf.size(), a, [&](const PtwEvent& x) { ev(x); }, st, in_sync, more);
    check(e.stopped <= buf.size(), "stopped past the end of the piece");
    check(more || e.stopped == buf.size(), "the last piece stopped short");
    in_sync = e.synced;
    carry.assign(buf.begin() + long(e.stopped), buf.end());
  }
  check_stats(st, len);
  ev.done(a);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 0x80u)
    assembler_only(data + 1, size - 1);
  else
    stream(data[0], data + 1, size - 1);
  return 0;
}
