#include "allocators/library.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace heaplab::allocators {

const std::vector<KnownAllocator>& known_allocators() {
  static const std::vector<KnownAllocator> known = {
      {"glibc", "", "libc6"},
      {"jemalloc", "libjemalloc.so.2", "libjemalloc2"},
      {"mimalloc", "libmimalloc.so.2", "libmimalloc2.0"},
      {"tcmalloc", "libtcmalloc.so.4", "libgoogle-perftools4"},
  };
  return known;
}

namespace {

// dlopen in a child, so that a library's constructors never run in heaplab.
// Returns "" and the path on success, or the error text.
std::string probe(const std::string& lib, std::string& path) {
  int fds[2];
  if (pipe(fds) != 0) return std::string("pipe: ") + std::strerror(errno);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return std::string("fork: ") + std::strerror(errno);
  }
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      out = std::string("E") + (e ? e : "cannot be loaded");
    } else {
      // dlsym also searches the library's dependencies: malloc must be its own.
      void* fn = dlsym(h, "malloc");
      link_map* map = nullptr;
      Dl_info info;
      if (!fn || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0 || !dladdr(fn, &info) ||
          info.dli_fbase != reinterpret_cast<void*>(map->l_addr))
        out = "Edoes not define malloc";
      else
        out = std::string("P") + (map->l_name && *map->l_name ? map->l_name : lib.c_str());
    }
    ssize_t w = write(fds[1], out.data(), out.size());
    (void)w;
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (out.empty()) return "crashed while being loaded";
  if (out[0] == 'E') return out.substr(1);
  path = out.substr(1);
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
