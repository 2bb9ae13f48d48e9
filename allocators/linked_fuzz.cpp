// Fuzz target for the ELF reader behind program_allocator (linked.cpp): the
// input is an executable's bytes, read through a memfd as the file would be
// (by offset, bounded). Properties: no crash, hang or unbounded allocation
// on any bytes; what it finds is well formed (a name; the allocator's own
// functions sorted and unique, the block-handling ones among them).
//   scripts/fuzz.sh 60 linked_fuzz      (libFuzzer with clang, ASan/UBSan)
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "allocators/linked.h"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "linked_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("linked_fuzz", MFD_CLOEXEC);
  if (fd < 0) broken("memfd_create failed");
  if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != ssize_t(size))) broken("cannot write the memfd");
  const auto found = heaplab::allocators::program_allocator("/proc/self/fd/" + std::to_string(fd));
  if (!found) return 0;
  if (found->name.empty()) broken("an allocator without a name");
  if (!std::is_sorted(found->own_api.begin(), found->own_api.end()) ||
      std::adjacent_find(found->own_api.begin(), found->own_api.end()) != found->own_api.end())
    broken("own_api not sorted and unique");
  for (const std::string& f : found->block_api)
    if (!std::binary_search(found->own_api.begin(), found->own_api.end(), f)) broken("block_api not in own_api");
  if (found->library.empty() && found->name != "its own malloc") broken("an allocator without its library");
  return 0;
}
