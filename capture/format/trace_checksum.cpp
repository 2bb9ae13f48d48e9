#include <xxhash.h>

#include "capture/format/trace_format.h"

namespace heaplab::trace {

uint64_t block_checksum(uint32_t type, const void* payload, size_t len) {
  const uint64_t seed = (uint64_t{type} << 32) | static_cast<uint32_t>(len);
  return XXH3_64bits_withSeed(payload, len, seed);
}

uint64_t plain_checksum(const void* data, size_t len) { return XXH3_64bits(data, len); }

}  // namespace heaplab::trace
