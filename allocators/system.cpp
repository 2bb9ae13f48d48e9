// heaplab-replay: the replayer of the preload mode and of glibc.
//
// Without --direct-library the calls go to the process's malloc, whichever
// library LD_PRELOAD put first (or glibc). With --direct-library PATH, a
// custom allocator is loaded directly: dlopen'ed with RTLD_DEEPBIND|RTLD_LOCAL
// (so it keeps its own symbols and does not replace the process's malloc),
// and called through the functions it defines itself; what it lacks is built
// from what it has (calloc from malloc, aligned calls from memalign or
// posix_memalign; operator new/delete always from its malloc/free, so that
// blocks never cross between its C and C++ allocation paths).
#include <dlfcn.h>
#include <link.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocators/backend.h"
#include "replay/replayer.h"

namespace {

using heaplab::allocators::LibcApi;

struct System : LibcApi {
  static constexpr const char* kName = "system";
};

struct Custom {
  static constexpr const char* kName = "custom";
  static inline void* handle = nullptr;
  static inline std::vector<std::string> emulated;
  static inline void* (*f_malloc)(size_t) = nullptr;
  static inline void (*f_free)(void*) = nullptr;
  static inline void* (*f_calloc)(size_t, size_t) = nullptr;
  static inline void* (*f_realloc)(void*, size_t) = nullptr;
  static inline void* (*f_reallocarray)(void*, size_t, size_t) = nullptr;
  static inline void* (*f_memalign)(size_t, size_t) = nullptr;
  static inline int (*f_posix_memalign)(void**, size_t, size_t) = nullptr;
  static inline void* (*f_aligned_alloc)(size_t, size_t) = nullptr;
  static inline void* (*f_valloc)(size_t) = nullptr;
  static inline void* (*f_pvalloc)(size_t) = nullptr;

  static void* aligned(size_t a, size_t n) {
    if (f_memalign) return f_memalign(a, n);
    if (f_posix_memalign) {
      void* p = nullptr;
      return f_posix_memalign(&p, a, n) == 0 ? p : nullptr;
    }
    if (f_aligned_alloc) return f_aligned_alloc(a, n);
    errno = ENOMEM;
    return nullptr;
  }

  static void* malloc(size_t n) { return f_malloc(n); }
  static void* calloc(size_t c, size_t n) {
    if (f_calloc) return f_calloc(c, n);
    size_t bytes;
    if (__builtin_mul_overflow(c, n, &bytes)) return errno = ENOMEM, nullptr;
    void* p = f_malloc(bytes);
    if (p) std::memset(p, 0, bytes);
    return p;
  }
  static void* realloc(void* p, size_t n) { return f_realloc(p, n); }
  static void* reallocarray(void* p, size_t c, size_t n) {
    if (f_reallocarray) return f_reallocarray(p, c, n);
    size_t bytes;
    if (__builtin_mul_overflow(c, n, &bytes)) return errno = ENOMEM, nullptr;
    return f_realloc(p, bytes);
  }
  static void free(void* p) { f_free(p); }
  static void* memalign(size_t a, size_t n) { return aligned(a, n); }
  static int posix_memalign(void** out, size_t a, size_t n) {
    if (f_posix_memalign) return f_posix_memalign(out, a, n);
    if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
    void* p = aligned(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
  }
  static void* aligned_alloc(size_t a, size_t n) {
    return f_aligned_alloc ? f_aligned_alloc(a, n) : aligned(a, n);
  }
  static void* valloc(size_t n) { return f_valloc ? f_valloc(n) : aligned(4096, n); }
  static void* pvalloc(size_t n) {
    return f_pvalloc ? f_pvalloc(n) : aligned(4096, (n + 4095) & ~size_t{4095});
  }
  // C++ allocation: a failure returns NULL, which the engine records.
  static void* op_new(size_t n) { return f_malloc(n); }
  static void* op_new_array(size_t n) { return f_malloc(n); }
  static void* op_new_nothrow(size_t n) { return f_malloc(n); }
  static void* op_new_array_nothrow(size_t n) { return f_malloc(n); }
  static void* op_new_aligned(size_t n, size_t a) { return aligned(a, n); }
  static void* op_new_array_aligned(size_t n, size_t a) { return aligned(a, n); }
  static void* op_new_aligned_nothrow(size_t n, size_t a) { return aligned(a, n); }
  static void* op_new_array_aligned_nothrow(size_t n, size_t a) { return aligned(a, n); }
  static void op_delete(void* p) { f_free(p); }
  static void op_delete_array(void* p) { f_free(p); }
  static void op_delete_sized(void* p, size_t) { f_free(p); }
  static void op_delete_array_sized(void* p, size_t) { f_free(p); }
  static void op_delete_aligned(void* p, size_t) { f_free(p); }
  static void op_delete_array_aligned(void* p, size_t) { f_free(p); }
  static void op_delete_sized_aligned(void* p, size_t, size_t) { f_free(p); }
  static void op_delete_array_sized_aligned(void* p, size_t, size_t) { f_free(p); }
  static void op_delete_nothrow(void* p) { f_free(p); }
  static void op_delete_array_nothrow(void* p) { f_free(p); }
  static void op_delete_aligned_nothrow(void* p, size_t) { f_free(p); }
  static void op_delete_array_aligned_nothrow(void* p, size_t) { f_free(p); }

  static nlohmann::json describe() {
    nlohmann::json j = heaplab::allocators::describe_allocator(handle);
    j["emulated"] = emulated;
    return j;
  }
  static nlohmann::json stats() { return heaplab::allocators::allocator_stats(handle); }
  static void init() {}  // load() did the work

  // A function the library defines itself (not one of its dependencies').
  template <typename F>
  static F own(const char* name, const std::string& lib_name) {
    void* f = dlsym(handle, name);
    Dl_info info{};
    if (!f || !dladdr(f, &info) || !info.dli_fname || lib_name != info.dli_fname) {
      emulated.push_back(name);
      return nullptr;
    }
    return reinterpret_cast<F>(f);
  }

  static void load(const std::string& path) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      const char* e = dlerror();
      throw std::invalid_argument("--direct-library: cannot load it directly: " +
                               std::string(e ? e : "dlopen failed") +
                               " (try --load preload)");
    }
    link_map* lm = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name)
      throw std::invalid_argument("--direct-library: cannot find where '" + path + "' was loaded");
    const std::string name = lm->l_name;
    f_malloc = own<decltype(f_malloc)>("malloc", name);
    f_free = own<decltype(f_free)>("free", name);
    f_realloc = own<decltype(f_realloc)>("realloc", name);
    if (!f_malloc || !f_free || !f_realloc)
      throw std::invalid_argument("--direct-library: '" + path +
                               "' does not define malloc, free and realloc itself");
    emulated.clear();
    f_calloc = own<decltype(f_calloc)>("calloc", name);
    f_reallocarray = own<decltype(f_reallocarray)>("reallocarray", name);
    f_memalign = own<decltype(f_memalign)>("memalign", name);
    f_posix_memalign = own<decltype(f_posix_memalign)>("posix_memalign", name);
    f_aligned_alloc = own<decltype(f_aligned_alloc)>("aligned_alloc", name);
    f_valloc = own<decltype(f_valloc)>("valloc", name);
    f_pvalloc = own<decltype(f_pvalloc)>("pvalloc", name);
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace heaplab::replay;
  return replayer_main(argc, argv, hooks_of<System>(), [](const ReplayerArgs& args) {
    if (args.direct_library.empty()) return hooks_of<System>();
    Custom::load(args.direct_library);
    return hooks_of<Custom>();
  });
}
