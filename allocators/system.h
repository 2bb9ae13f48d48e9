// The backends of heaplab-replay: `System`, the preload mode and glibc, and
// `Custom`, a custom allocator loaded directly.
//
// System's calls go to the process's malloc, whichever library LD_PRELOAD
// put first (or glibc). With --direct-library PATH the replayer loads a
// custom allocator directly (System::Direct): dlopen'ed with
// RTLD_DEEPBIND|RTLD_LOCAL (so it keeps its own symbols and does not replace
// the process's malloc), and called through the functions it defines itself;
// what it lacks is built from what it has (calloc from malloc, aligned calls
// from memalign or posix_memalign; operator new/delete always from its
// malloc/free, so that blocks never cross between its C and C++ allocation
// paths).
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "allocators/backend.h"

namespace heaplab::allocators {

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
  static void* aligned_alloc(size_t a, size_t n) { return f_aligned_alloc ? f_aligned_alloc(a, n) : aligned(a, n); }
  static void* valloc(size_t n) { return f_valloc ? f_valloc(n) : aligned(4096, n); }
  static void* pvalloc(size_t n) { return f_pvalloc ? f_pvalloc(n) : aligned(4096, (n + 4095) & ~size_t{4095}); }
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
    nlohmann::json j = describe_allocator(handle);
    j["emulated"] = emulated;
    return j;
  }
  static nlohmann::json stats() { return allocator_stats(handle); }
  static void init() {}  // load() did the work

  // Loads the library at `path` (dlopen, RTLD_DEEPBIND|RTLD_LOCAL) and finds
  // the functions it defines itself; what it lacks is emulated (listed in
  // `emulated`). Throws std::invalid_argument with a one-line message.
  static void load(const std::string& path);

 private:
  template <typename F>
  static F own(const char* name, const std::string& lib_name);
};

struct System : LibcApi {
  static constexpr const char* kName = "system";
  using Direct = Custom;  // --direct-library PATH
};
static_assert(Backend<Custom>);
static_assert(LoadsDirectLibrary<System>);

}  // namespace heaplab::allocators
