// Where an allocator's shared library is, for loading it with LD_PRELOAD:
// the names heaplab knows (glibc, jemalloc, mimalloc, tcmalloc) or the path
// of any custom .so; and which replayer executable loads it directly.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace heaplab::allocators {

struct KnownAllocator {
  std::string name;         // "jemalloc"
  std::string soname;       // "libjemalloc.so.2"; empty for glibc (the system allocator)
  std::string package;      // Debian package that provides it
  std::string dev_package;  // Debian package needed to build its direct replayer
  std::string replayer;     // executable of the direct load mode, next to `heaplab`
};

const std::vector<KnownAllocator>& known_allocators();

struct ResolvedLibrary {
  std::string name;  // as given, or the known name
  std::string path;  // absolute path of the loaded library; empty = the system allocator
};

// Resolves NAME (a known name, or a path to a .so) and checks, in a child
// process, that it can be preloaded and defines malloc. Returns the library or sets
// `error` to one line: "allocator 'X': ...".
std::optional<ResolvedLibrary> resolve_allocator(const std::string& name, std::string& error);

}  // namespace heaplab::allocators
