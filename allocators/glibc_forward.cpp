// libheaplab_glibc.so: glibc's malloc for a program linked against another
// allocator (Debian's redis-server links libjemalloc.so.2). Preloaded, its
// malloc family and C++ operators come before the linked allocator's and
// forward to glibc's own entry points (__libc_malloc and its siblings), so
// that `heaplab capture --allocator glibc` really runs the program on glibc.
// The allocator's own functions (mallctl, mallocx, ...) still reach it: the
// capture names them (allocators/linked.h).
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <new>

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
}

namespace {

bool power_of_two(size_t a) { return a && (a & (a - 1)) == 0; }

void* new_or_throw(size_t n, size_t align) {
  for (;;) {
    void* p = align ? __libc_memalign(align, n ? n : 1) : __libc_malloc(n ? n : 1);
    if (p) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}

void* new_or_null(size_t n, size_t align) noexcept {
  try {
    return new_or_throw(n, align);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t n) { return __libc_malloc(n); }
__attribute__((visibility("default"))) void free(void* p) { __libc_free(p); }
__attribute__((visibility("default"))) void* calloc(size_t c, size_t n) { return __libc_calloc(c, n); }
__attribute__((visibility("default"))) void* realloc(void* p, size_t n) { return __libc_realloc(p, n); }
__attribute__((visibility("default"))) void* reallocarray(void* p, size_t c, size_t n) {
  size_t bytes;
  if (__builtin_mul_overflow(c, n, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_realloc(p, bytes);
}
__attribute__((visibility("default"))) void* memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
__attribute__((visibility("default"))) void* aligned_alloc(size_t a, size_t n) {
  if (!power_of_two(a)) {
    errno = EINVAL;
    return nullptr;
  }
  return __libc_memalign(a, n);
}
__attribute__((visibility("default"))) int posix_memalign(void** out, size_t a, size_t n) {
  if (!power_of_two(a) || a % sizeof(void*) != 0) return EINVAL;
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
__attribute__((visibility("default"))) void* valloc(size_t n) { return __libc_valloc(n); }
__attribute__((visibility("default"))) void* pvalloc(size_t n) { return __libc_pvalloc(n); }
// glibc's own, found in libc itself (not the linked allocator's).
__attribute__((visibility("default"))) size_t malloc_usable_size(void* p) {
  using Fn = size_t (*)(void*);
  static Fn glibc = [] {
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    return libc ? reinterpret_cast<Fn>(dlsym(libc, "malloc_usable_size")) : nullptr;
  }();
  return glibc && p ? glibc(p) : 0;
}

}  // extern "C"

#define HEAPLAB_EXPORT __attribute__((visibility("default")))
HEAPLAB_EXPORT void* operator new(size_t n) { return new_or_throw(n, 0); }
HEAPLAB_EXPORT void* operator new[](size_t n) { return new_or_throw(n, 0); }
HEAPLAB_EXPORT void* operator new(size_t n, const std::nothrow_t&) noexcept { return new_or_null(n, 0); }
HEAPLAB_EXPORT void* operator new[](size_t n, const std::nothrow_t&) noexcept { return new_or_null(n, 0); }
HEAPLAB_EXPORT void* operator new(size_t n, std::align_val_t a) { return new_or_throw(n, size_t(a)); }
HEAPLAB_EXPORT void* operator new[](size_t n, std::align_val_t a) { return new_or_throw(n, size_t(a)); }
HEAPLAB_EXPORT void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_or_null(n, size_t(a));
}
HEAPLAB_EXPORT void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_or_null(n, size_t(a));
}
HEAPLAB_EXPORT void operator delete(void* p) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete[](void* p) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete(void* p, size_t) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete[](void* p, size_t) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete(void* p, std::align_val_t) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete(void* p, size_t, std::align_val_t) noexcept { __libc_free(p); }
HEAPLAB_EXPORT void operator delete[](void* p, size_t, std::align_val_t) noexcept { __libc_free(p); }
