// One zstd frame inside a block's payload (ADDR; MEMX streams its own): written at level 3,
// and read only when it declares exactly the size its block's header says
// and decompresses to exactly that (a damaged or hostile header never makes
// the reader allocate more than the header's own, already bounded, size).
#pragma once

#include <zstd.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace heaplab::trace {

inline void append_zstd_frame(std::string& out, std::string_view raw) {
  std::string z(ZSTD_compressBound(raw.size()), '\0');
  size_t n = ZSTD_compress(z.data(), z.size(), raw.data(), raw.size(), 3);
  if (ZSTD_isError(n)) n = 0;  // cannot happen with a bound-sized buffer
  out.append(z.data(), n);
}

// `raw` = the frame's content if it is `raw_size` bytes; false otherwise.
inline bool read_zstd_frame(std::string_view frame, uint64_t raw_size, std::string& raw) {
  if (ZSTD_getFrameContentSize(frame.data(), frame.size()) != raw_size) return false;
  raw.assign(raw_size, '\0');
  const size_t n = ZSTD_decompress(raw.data(), raw.size(), frame.data(), frame.size());
  return !ZSTD_isError(n) && n == raw_size;
}

}  // namespace heaplab::trace
