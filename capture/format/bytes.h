// Little-endian loads/stores, zigzag and prefix varints used by the trace format.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

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

// ---- Prefix varints (the column encoding of chunks, FORMAT.md) ----------
// A value below 2^56 takes n = max(1, ceil(bits/7)) bytes: the little-endian
// n-byte word (v << n) | (1 << (n-1)), so the first byte's lowest set bit
// says the length. Larger values take 9 bytes: 0x00 then 8 bytes of v.
// Decoding needs no branch on the length; readers keep 8 bytes of readable
// padding after the last column.

inline constexpr size_t kPvMaxBytes = 9;

// Length in bytes of v's prefix varint.
inline unsigned pv_length(uint64_t v) {
  // kLen[clz] for clz = 0..63 (v | 1 keeps clz below 64).
  static constexpr uint8_t kLen[64] = {
      9, 9, 9, 9, 9, 9, 9, 9, 8, 8, 8, 8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7,
      6, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 3,
      3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1};
  return kLen[__builtin_clzll(v | 1)];
}

// Writes v at p (p must have kPvMaxBytes writable); returns the length.
inline unsigned pv_store(uint8_t* p, uint64_t v) {
  const unsigned n = pv_length(v);
  if (n == 9) [[unlikely]] {
    p[0] = 0;
    std::memcpy(p + 1, &v, 8);
    return 9;
  }
  const uint64_t w = (v << n) | (uint64_t{1} << (n - 1));
  std::memcpy(p, &w, 8);
  return n;
}

// Reads a prefix varint at p (8 readable bytes after p required; 9 if the
// first byte is 0). Sets v and returns the length.
inline unsigned pv_load(const uint8_t* p, uint64_t& v) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  if ((w & 0xff) == 0) [[unlikely]] {
    std::memcpy(&v, p + 1, 8);
    return 9;
  }
  static constexpr uint64_t kMask[9] = {0,
                                        0xff,
                                        0xffff,
                                        0xffffff,
                                        0xffffffff,
                                        0xffffffffff,
                                        0xffffffffffff,
                                        0xffffffffffffff,
                                        ~uint64_t{0}};
  const unsigned n = static_cast<unsigned>(__builtin_ctzll(w)) + 1;
  v = (w & kMask[n]) >> n;
  return n;
}

}  // namespace heaplab::trace::bytes
