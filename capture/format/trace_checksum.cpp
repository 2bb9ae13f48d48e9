#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__) && defined(HEAPLAB_XXH_DISPATCH)
// XXH3 on AVX2 where the CPU has it (chosen at run time; the same hashes):
// twice SSE2's speed here. (CMakeLists.txt: where the library has it.)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "capture/format/trace_format.h"

namespace heaplab::trace {

uint64_t block_checksum(uint32_t type, const void* payload, size_t len) {
  const uint64_t seed = (uint64_t{type} << 32) | static_cast<uint32_t>(len);
  return XXH3_64bits_withSeed(payload, len, seed);
}

bool block_checksum_of_file(uint32_t type, int fd, uint64_t offset, uint64_t len, uint64_t& sum) {
  const uint64_t seed = (uint64_t{type} << 32) | static_cast<uint32_t>(len);
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st(XXH3_createState(), XXH3_freeState);
  if (!st || XXH3_64bits_reset_withSeed(st.get(), seed) != XXH_OK) {
    errno = ENOMEM;
    return false;
  }
  std::vector<char> buf(size_t{1} << 20);
  while (len > 0) {
    const ssize_t n = ::pread(fd, buf.data(), std::min<uint64_t>(len, buf.size()), off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    XXH3_64bits_update(st.get(), buf.data(), size_t(n));
    offset += uint64_t(n);
    len -= uint64_t(n);
  }
  sum = XXH3_64bits_digest(st.get());
  return true;
}

uint64_t plain_checksum(const void* data, size_t len) { return XXH3_64bits(data, len); }

}  // namespace heaplab::trace
