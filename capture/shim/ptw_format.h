// How a heap event travels through Intel PT: five 64-bit `ptwrite`
// payloads per event, the shim's raw record (op, time, fields a, b, c).
//
//   word 0  header: bits 63..48 the magic 0xA7E5, 47..40 the op, 39..32 a
//           check byte over the other four words and the sequence number,
//           31..0 the thread's event sequence number (from 0, wrapping)
//   word 1  the TSC, read where the software route stamps its record
//   word 2..4  a, b, c as in capture/shim/raw_format.h
//
// The time travels in the payload rather than being taken from the PT
// stream's timing packets: those come every few hundred bytes (PSB+ TSC),
// with MTC packets in between whose refinement needs the CTC ratio and
// differs between decoders. A payload TSC is exact, the same in every
// decoder (direct, dlfilter, text), and stamped at the same point of the
// call as the software route's. The cost is a fifth ptwrite (10 bytes).
//
// Resynchronising after lost data (an OVF packet, a truncated AUX buffer):
// the decoder waits for a word whose top 16 bits are the magic and accepts
// the event only if the check byte matches the three words that follow, so
// a field word that happens to look like a header (a size of 0xA7E5... or a
// pointer there, impossible in user space) is accepted only with
// probability 2^-8 and only right after a loss. The sequence number counts
// events lost whole: a gap between two accepted headers of one thread.
//
// Header-only and libc-free: the shim's ptwrite sink includes it.
#pragma once

#include <stdint.h>

namespace heaplab::pt {

inline constexpr uint64_t kMagic = 0xA7E5;
inline constexpr unsigned kWordsPerEvent = 5;

inline constexpr uint64_t rotl(uint64_t v, unsigned k) { return (v << k) | (v >> ((64 - k) & 63)); }

// The check byte: every bit of tsc, a, b, c and seq reaches it.
inline constexpr uint8_t check_byte(uint64_t tsc, uint64_t a, uint64_t b, uint64_t c, uint32_t seq) {
  uint64_t x = rotl(tsc, 11) ^ a ^ rotl(b, 21) ^ rotl(c, 42) ^ (uint64_t{seq} * 0x9E3779B97F4A7C15ull);
  x ^= x >> 32;
  x ^= x >> 16;
  x ^= x >> 8;
  return uint8_t(x);
}

inline constexpr uint64_t header_word(uint32_t op, uint32_t seq, uint64_t tsc, uint64_t a, uint64_t b, uint64_t c) {
  return kMagic << 48 | uint64_t(op & 0xff) << 40 | uint64_t(check_byte(tsc, a, b, c, seq)) << 32 | seq;
}

inline constexpr bool is_header(uint64_t w) { return (w >> 48) == kMagic; }
inline constexpr uint32_t header_op(uint64_t w) { return uint32_t(w >> 40) & 0xff; }
inline constexpr uint8_t header_check(uint64_t w) { return uint8_t(w >> 32); }
inline constexpr uint32_t header_seq(uint64_t w) { return uint32_t(w); }

}  // namespace heaplab::pt
