// What allocator answers malloc in this process, and its statistics, found
// through the native APIs the allocator exports (looked up with dlsym, so the
// same code serves the preload mode, where the replayer was not linked
// against the allocator, and the direct mode, where it was).
#include <dlfcn.h>
#include <elf.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <malloc.h>

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <vector>
#include <cstdio>
#include <cstring>
#include <string>

#include "allocators/backend.h"

namespace heaplab::allocators {

namespace {

struct BuildIdSearch {
  const std::string* path;
  std::string id;
};

int find_build_id(dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<BuildIdSearch*>(data);
  const char* name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : nullptr;
  char real[PATH_MAX];
  if (!name || !realpath(name, real) || *s->path != real) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* nm = p + sizeof(ElfW(Nhdr));
      const char* desc = nm + ((nh->n_namesz + 3) & ~3u);
      if (desc + nh->n_descsz > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && std::memcmp(nm, "GNU", 4) == 0) {
        static const char hex[] = "0123456789abcdef";
        for (uint32_t k = 0; k < nh->n_descsz; ++k) {
          const auto b = static_cast<unsigned char>(desc[k]);
          s->id += hex[b >> 4];
          s->id += hex[b & 15];
        }
        return 1;
      }
      p = desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return 1;
}

template <typename F>
F lookup(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}

// The object that defines `malloc` as seen from `handle`.
std::string malloc_library(void* handle) {
  void* m = dlsym(handle, "malloc");
  Dl_info info{};
  if (m && dladdr(m, &info) && info.dli_fname) {
    char real[PATH_MAX];
    if (realpath(info.dli_fname, real)) return real;
    return info.dli_fname;
  }
  return "";
}

bool is_libc(const std::string& path) { return path.find("/libc.so") != std::string::npos; }

}  // namespace

std::string loaded_build_id(const std::string& path) {
  BuildIdSearch s{&path, {}};
  dl_iterate_phdr(find_build_id, &s);
  return s.id;
}

nlohmann::json describe_allocator(void* handle) {
  nlohmann::json j;
  const std::string lib = malloc_library(handle);
  j["library"] = lib;
  j["build_id"] = loaded_build_id(lib);
  using mallctl_t = int (*)(const char*, void*, size_t*, void*, size_t);
  using mi_version_t = int (*)();
  using tc_version_t = const char* (*)(int*, int*, const char**);
  if (auto mallctl = lookup<mallctl_t>(handle, "mallctl")) {
    const char* v = nullptr;
    size_t len = sizeof v;
    if (mallctl("version", &v, &len, nullptr, 0) == 0 && v) j["version"] = std::string("jemalloc ") + v;
  } else if (auto miv = lookup<mi_version_t>(handle, "mi_version")) {
    const int v = miv();
    j["version"] =
        "mimalloc " + std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) + "." + std::to_string(v % 10);
  } else if (auto tcv = lookup<tc_version_t>(handle, "tc_version")) {
    int major = 0, minor = 0;
    const char* patch = nullptr;
    const char* v = tcv(&major, &minor, &patch);
    if (v) j["version"] = v;
  } else if (is_libc(lib)) {
    j["version"] = std::string("glibc ") + gnu_get_libc_version();
  }
  return j;
}

nlohmann::json allocator_stats(void* handle) {
  nlohmann::json j = nlohmann::json::object();
  using mallctl_t = int (*)(const char*, void*, size_t*, void*, size_t);
  using mi_info_t = void (*)(size_t*, size_t*, size_t*, size_t*, size_t*, size_t*, size_t*, size_t*);
  using tc_prop_t = int (*)(const char*, size_t*);
  if (auto mallctl = lookup<mallctl_t>(handle, "mallctl")) {
    uint64_t epoch = 1;
    size_t elen = sizeof epoch;
    mallctl("epoch", &epoch, &elen, &epoch, elen);
    j["source"] = "mallctl";
    for (const char* key :
         {"stats.allocated", "stats.active", "stats.resident", "stats.mapped", "stats.retained", "stats.metadata"}) {
      size_t v = 0, len = sizeof v;
      if (mallctl(key, &v, &len, nullptr, 0) == 0) j[key] = v;
    }
  } else if (auto mi = lookup<mi_info_t>(handle, "mi_process_info")) {
    size_t elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults;
    mi(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
    j["source"] = "mi_process_info";
    j["current_rss"] = rss;
    j["peak_rss"] = peak_rss;
    j["current_commit"] = commit;
    j["peak_commit"] = peak_commit;
    j["page_faults"] = faults;
  } else if (auto prop = lookup<tc_prop_t>(handle, "MallocExtension_GetNumericProperty")) {
    j["source"] = "MallocExtension";
    for (const char* key : {"generic.current_allocated_bytes", "generic.heap_size", "tcmalloc.pageheap_free_bytes",
                            "tcmalloc.pageheap_unmapped_bytes", "tcmalloc.central_cache_free_bytes",
                            "tcmalloc.transfer_cache_free_bytes", "tcmalloc.thread_cache_free_bytes"}) {
      size_t v = 0;
      if (prop(key, &v)) j[key] = v;
    }
  } else if (is_libc(malloc_library(handle))) {
    const struct mallinfo2 m = mallinfo2();
    j["source"] = "mallinfo2";
    j["arena"] = m.arena;
    j["hblkhd"] = m.hblkhd;
    j["uordblks"] = m.uordblks;
    j["fordblks"] = m.fordblks;
    j["keepcost"] = m.keepcost;
  }
  return j;
}

namespace {

std::vector<std::string> g_emulated;  // optional functions LibcApi builds itself

// Emulations over the allocator's own malloc-family functions.
void* emu_memalign(size_t a, size_t n) {
  // posix_memalign and aligned_alloc are the allocator's own if memalign is
  // emulated (init() makes sure of it), so no cycle.
  if (a < sizeof(void*)) a = sizeof(void*);
  if ((a & (a - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  void* p = nullptr;
  const int rc = ::posix_memalign(&p, a, n);
  if (rc != 0) {
    errno = rc;
    return nullptr;
  }
  return p;
}
int emu_posix_memalign(void** out, size_t a, size_t n) {
  if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
  void* p = LibcApi::optional.memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* emu_aligned_alloc(size_t a, size_t n) { return LibcApi::optional.memalign(a, n); }
void* emu_valloc(size_t n) { return LibcApi::optional.memalign(size_t(getpagesize()), n); }
void* emu_pvalloc(size_t n) {
  const size_t page = size_t(getpagesize());
  if (n > SIZE_MAX - page) {
    errno = ENOMEM;
    return nullptr;
  }
  return LibcApi::optional.memalign(page, n == 0 ? page : (n + page - 1) & ~(page - 1));
}
void* emu_reallocarray(void* p, size_t c, size_t n) {
  size_t bytes;
  if (__builtin_mul_overflow(c, n, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return ::realloc(p, bytes);
}

// Whether `name`, as the process resolves it, lives in the same object as malloc.
bool defined_with_malloc(const char* name) {
  Dl_info a{}, b{};
  void* m = dlsym(RTLD_DEFAULT, "malloc");
  void* f = dlsym(RTLD_DEFAULT, name);
  return m && f && dladdr(m, &a) && dladdr(f, &b) && a.dli_fbase == b.dli_fbase;
}

}  // namespace

void LibcApi::init() {
  g_emulated.clear();
  const auto check = [](const char* name, auto& slot, auto emulation) {
    if (!defined_with_malloc(name)) {
      slot = emulation;
      g_emulated.push_back(name);
    }
  };
  // memalign first: the others are built on it. If neither memalign nor
  // posix_memalign is the allocator's own there is no aligned allocation to
  // build on; glibc's then answers (and says so in "emulated").
  if (!defined_with_malloc("memalign") && defined_with_malloc("posix_memalign")) {
    optional.memalign = emu_memalign;
    g_emulated.push_back("memalign");
  }
  check("posix_memalign", optional.posix_memalign, emu_posix_memalign);
  check("aligned_alloc", optional.aligned_alloc, emu_aligned_alloc);
  check("valloc", optional.valloc, emu_valloc);
  check("pvalloc", optional.pvalloc, emu_pvalloc);
  check("reallocarray", optional.reallocarray, emu_reallocarray);
}

nlohmann::json LibcApi::describe() {
  nlohmann::json j = describe_allocator(RTLD_DEFAULT);
  j["emulated"] = g_emulated;
  return j;
}
nlohmann::json LibcApi::stats() { return allocator_stats(RTLD_DEFAULT); }

}  // namespace heaplab::allocators
