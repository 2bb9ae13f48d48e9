// Little-endian loads/stores and LEB128 varints used by the trace format.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace heaplab::trace::bytes {

inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t load_u64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

inline void put_u8(std::string& s, uint8_t v) { s.push_back(static_cast<char>(v)); }
inline void put_u16(std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); }
inline void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
inline void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }

constexpr uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
constexpr int64_t unzigzag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Appends an unsigned LEB128 varint (1..10 bytes).
inline void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

// Reads an unsigned LEB128 varint from [p, end). Returns false (and leaves p
// unspecified) when the varint runs past `end` or is longer than 10 bytes /
// overflows 64 bits.
inline bool get_varint(const uint8_t*& p, const uint8_t* end, uint64_t& v) {
  if (p < end && *p < 0x80) [[likely]] {
    v = *p++;
    return true;
  }
  uint64_t r = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (p >= end) return false;
    uint8_t b = *p++;
    if (shift == 63 && b > 1) return false;
    r |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (b < 0x80) {
      v = r;
      return true;
    }
  }
  return false;
}

}  // namespace heaplab::trace::bytes
