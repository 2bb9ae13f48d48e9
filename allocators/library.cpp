#include "allocators/library.h"

#include <unistd.h>

#include <cstring>

#include "common/process.h"

namespace heaplab::allocators {

const std::vector<KnownAllocator>& known_allocators() {
  static const std::vector<KnownAllocator> known = {
      // The registry: one line per allocator (and its backend file in this folder).
      {"glibc", "", "libc6", "libc6-dev", "heaplab-replay"},
      {"jemalloc", "libjemalloc.so.2", "libjemalloc2", "libjemalloc-dev", "heaplab-replay-jemalloc"},
      {"mimalloc", "libmimalloc.so.2", "libmimalloc2.0", "libmimalloc-dev", "heaplab-replay-mimalloc"},
      {"tcmalloc", "libtcmalloc.so.4", "libgoogle-perftools4", "libgoogle-perftools-dev", "heaplab-replay-tcmalloc"},
  };
  return known;
}

namespace {

// Runs /bin/true with LD_PRELOAD=lib, LD_BIND_NOW=1 and LD_DEBUG=bindings:
// the dynamic loader then reports whether the library could be preloaded
// (some, like jemalloc, cannot be dlopen'ed: static TLS) and which object
// libc's own references to malloc bind to. Nothing of the library runs in
// heaplab. Returns "" and the path on success, or the error text.
std::string probe(const std::string& lib, std::string& path) {
  process::Spec spec;
  spec.argv = {"/bin/true"};
  spec.out = process::Stdio::null;
  spec.err = process::Stdio::pipe;
  spec.env = {{"LD_PRELOAD", lib}, {"LD_BIND_NOW", "1"}, {"LD_DEBUG", "bindings"}, {"LD_DEBUG_OUTPUT", std::nullopt}};
  process::Output o;
  try {
    o = process::run(spec);
  } catch (const process::SpawnError& e) {
    return e.what();
  }
  const std::string& out = o.err;
  const int status = o.status;
  std::string provider;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t eol = out.find('\n', pos);
    if (eol == std::string::npos) eol = out.size();
    std::string line = out.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.find("cannot be preloaded") != std::string::npos) {
      size_t colon = line.find("ERROR: ld.so: ");
      return colon == std::string::npos ? line : line.substr(colon + 14);
    }
    // "binding file /lib/.../libc.so.6 [0] to /usr/lib/.../libjemalloc.so.2 [0]: normal symbol `malloc'"
    size_t f = line.find("binding file ");
    size_t to = line.find(" to ");
    if (f == std::string::npos || to == std::string::npos || line.find("symbol `malloc'") == std::string::npos)
      continue;
    std::string from = line.substr(f + 13, to - f - 13);
    if (from.find("/libc.so") == std::string::npos) continue;
    std::string target = line.substr(to + 4);
    target = target.substr(0, target.find(" ["));
    provider = target;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && provider.empty()) return "cannot run /bin/true to check it";
  if (provider.empty() || provider.find("/libc.so") != std::string::npos) return "does not define malloc";
  path = provider;
  return "";
}

}  // namespace

std::optional<ResolvedLibrary> resolve_allocator(const std::string& name, std::string& error) {
  std::string lib = name;
  std::string hint;
  if (name.empty() || name == "glibc" || name == "system") return ResolvedLibrary{"glibc", ""};
  bool known = false;
  for (const KnownAllocator& k : known_allocators()) {
    if (k.name == name) {
      lib = k.soname;
      hint = " (Debian package " + k.package + ")";
      known = true;
    }
  }
  if (!known && name.find('/') == std::string::npos) {
    std::string names;
    for (const KnownAllocator& k : known_allocators()) names += (names.empty() ? "" : ", ") + k.name;
    error = "allocator '" + name + "': unknown name (known: " + names + "; or give the path of a .so)";
    return std::nullopt;
  }
  if (!known && access(lib.c_str(), R_OK) != 0) {
    error = "allocator '" + name + "': " + std::strerror(errno);
    return std::nullopt;
  }
  std::string path;
  std::string e = probe(lib, path);
  if (!e.empty()) {
    error = "allocator '" + name + "': " + e + hint;
    return std::nullopt;
  }
  return ResolvedLibrary{name, path};
}

}  // namespace heaplab::allocators
