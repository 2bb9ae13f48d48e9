// Which allocator a program brings with it: a known allocator library among
// its DT_NEEDED entries (Debian's redis-server links libjemalloc.so.2), or
// a malloc of its own defined in the executable (an allocator linked in
// statically), and which of an allocator's own functions it calls
// (mallctl, mallocx, mi_*, tc_*, MallocExtension): those keep reaching that
// allocator whatever allocator the program is made to run on. Read from the
// executable's ELF section headers (its dynamic section and dynamic symbol
// table); the libraries it loads are not searched.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace heaplab::allocators {

struct ProgramAllocator {
  std::string name;                  // jemalloc, tcmalloc, mimalloc, ... or "its own malloc"
  std::string library;               // the DT_NEEDED entry ("libjemalloc.so.2"), or "" for one linked in
  std::vector<std::string> own_api;  // the allocator's own functions it imports
  // Of those, the ones that take or return heap blocks (mallocx, sdallocx,
  // mi_malloc, tc_free, ...): with another allocator answering malloc they
  // would mix two allocators' blocks. The rest (mallctl, nallocx,
  // malloc_stats_print) only read or set the allocator's state.
  std::vector<std::string> block_api;
};

// nullopt when the program uses the system allocator (or is not a 64-bit
// ELF file heaplab can read: then nothing is known of it).
std::optional<ProgramAllocator> program_allocator(const std::string& path);

}  // namespace heaplab::allocators
