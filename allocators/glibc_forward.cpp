// libheaplab_glibc.so: glibc's malloc for a program linked against another
// allocator (Debian's redis-server links libjemalloc.so.2). Preloaded, its
// malloc family and C++ operators come before the linked allocator's and
// call glibc's own: the functions are looked up in libc.so.6 itself
// (dlopen(RTLD_NOLOAD) + dlsym on its handle), never by name in the global
// scope, where an allocator that also exports __libc_malloc (tcmalloc,
// mimalloc do) would answer. Until the lookup is done (dlopen itself may
// allocate) requests are served from a small static arena. So `heaplab
// capture --allocator glibc` really runs the program on glibc, with glibc's
// exact semantics (aligned_alloc, malloc_usable_size, ...). The allocator's
// own functions (mallctl, mallocx, ...) still reach it: the capture refuses
// programs whose own-API calls take or return heap blocks
// (allocators/linked.h).
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <new>

namespace {

struct Glibc {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void* (*reallocarray)(void*, size_t, size_t);
  void* (*memalign)(size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  size_t (*malloc_usable_size)(void*);
};
Glibc g_libc;
const char* g_libc_path = nullptr;  // where the functions were found (for the test)
int g_state = 0;                    // 0: not looked up, 1: looking up, 2: done

// The arena for requests made while the lookup runs: never freed. A spin
// lock guards it (threads may ask while the lookup runs).
alignas(64) char g_arena[64 * 1024];
size_t g_arena_used = 0;
int g_arena_lock = 0;

bool in_arena(const void* p) {
  return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(g_arena) < sizeof g_arena;
}

void* arena_alloc(size_t n, size_t align) {
  // Aligned by address (not by offset), to the next power of two as glibc's memalign.
  if (align < 16) align = 16;
  if (align & (align - 1)) align = size_t{1} << (64 - __builtin_clzll(align));
  if (align > sizeof g_arena) {
    errno = ENOMEM;
    return nullptr;
  }
  while (__atomic_exchange_n(&g_arena_lock, 1, __ATOMIC_ACQUIRE)) {
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(g_arena), end = base + sizeof g_arena;
  // Each block is preceded by its size, for realloc out of the arena.
  const uintptr_t at = (base + g_arena_used + sizeof(size_t) + align - 1) & ~uintptr_t(align - 1);
  void* p = nullptr;
  if (at <= end && n <= end - at) {
    memcpy(reinterpret_cast<char*>(at) - sizeof(size_t), &n, sizeof n);
    g_arena_used = at + n - base;
    p = reinterpret_cast<void*>(at);
  } else {
    errno = ENOMEM;
  }
  __atomic_store_n(&g_arena_lock, 0, __ATOMIC_RELEASE);
  return p;
}

size_t arena_size(const void* p) {
  size_t n;
  memcpy(&n, static_cast<const char*>(p) - sizeof(size_t), sizeof n);
  return n;
}

[[noreturn]] void fail(const char* what) {
  static const char head[] = "libheaplab_glibc.so: cannot find glibc's ";
  ssize_t ignored = write(2, head, sizeof head - 1);
  ignored = write(2, what, strlen(what));
  ignored = write(2, " in libc.so.6\n", 14);
  (void)ignored;
  _exit(127);
}

template <class F>
void find(void* libc, F& out, const char* name) {
  out = reinterpret_cast<F>(dlsym(libc, name));
  if (!out) fail(name);
}

// Functions a glibc may keep only for old binaries: their own fallbacks.
void* fallback_reallocarray(void* p, size_t c, size_t n) {
  size_t bytes;
  if (__builtin_mul_overflow(c, n, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return g_libc.realloc(p, bytes);
}
void* fallback_valloc(size_t n) { return g_libc.memalign(size_t(sysconf(_SC_PAGESIZE)), n); }
void* fallback_pvalloc(size_t n) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  if (n > SIZE_MAX - page) {
    errno = ENOMEM;
    return nullptr;
  }
  return g_libc.memalign(page, n ? (n + page - 1) & ~(page - 1) : page);
}

template <class F>
void find_or(void* libc, F& out, const char* name, F fallback) {
  out = reinterpret_cast<F>(dlsym(libc, name));
  if (!out) out = fallback;
}

void resolve() {
  // One thread looks up (0 -> 1); the others, and the looking thread's own
  // requests meanwhile, are served by the arena until it is done (2).
  int expected = 0;
  if (!__atomic_compare_exchange_n(&g_state, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) fail("library");
  Glibc l{};
  find(libc, l.malloc, "malloc");
  find(libc, l.free, "free");
  find(libc, l.calloc, "calloc");
  find(libc, l.realloc, "realloc");
  find_or(libc, l.reallocarray, "reallocarray", fallback_reallocarray);
  find(libc, l.memalign, "memalign");
  find(libc, l.aligned_alloc, "aligned_alloc");
  find(libc, l.posix_memalign, "posix_memalign");
  find_or(libc, l.valloc, "valloc", fallback_valloc);
  find_or(libc, l.pvalloc, "pvalloc", fallback_pvalloc);
  find(libc, l.malloc_usable_size, "malloc_usable_size");
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(l.malloc), &info) && info.dli_fname) g_libc_path = info.dli_fname;
  g_libc = l;
  __atomic_store_n(&g_state, 2, __ATOMIC_RELEASE);
}

// Before the lookup is done: while it runs (here or in another thread),
// the arena; else look up first.
bool early(size_t n, size_t align, void** out) {
  if (__builtin_expect(__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == 2, 1)) return false;
  resolve();
  if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == 2) return false;
  *out = arena_alloc(n, align);
  return true;
}

__attribute__((constructor)) void init() { resolve(); }

void* new_or_throw(size_t n, size_t align) {
  for (;;) {
    void* p = nullptr;
    if (!early(n ? n : 1, align, &p)) p = align ? g_libc.aligned_alloc(align, n ? n : 1) : g_libc.malloc(n ? n : 1);
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

// Waits until the lookup is done (for calls on blocks glibc made, which
// exist only once it is).
void ready() {
  resolve();
  while (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != 2) {
  }
}

void release(void* p) {
  if (!p || in_arena(p)) return;
  ready();
  g_libc.free(p);
}

}  // namespace

#define HEAPLAB_EXPORT __attribute__((visibility("default")))

extern "C" {

HEAPLAB_EXPORT void* malloc(size_t n) {
  void* p;
  return early(n, 16, &p) ? p : g_libc.malloc(n);
}
HEAPLAB_EXPORT void free(void* p) { release(p); }
HEAPLAB_EXPORT void* calloc(size_t c, size_t n) {
  void* p;
  size_t bytes;
  if (__builtin_mul_overflow(c, n, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return early(bytes, 16, &p) ? p : g_libc.calloc(c, n);  // the arena is zeroed (static, never reused)
}
HEAPLAB_EXPORT void* realloc(void* old, size_t n) {
  void* p;
  if (!in_arena(old)) return early(n, 16, &p) ? p : g_libc.realloc(old, n);
  // Out of the arena: a new block and a copy.
  p = malloc(n);
  if (p) memcpy(p, old, arena_size(old) < n ? arena_size(old) : n);
  return p;
}
HEAPLAB_EXPORT void* reallocarray(void* old, size_t c, size_t n) {
  size_t bytes;
  if (__builtin_mul_overflow(c, n, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (in_arena(old) || __atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != 2) return realloc(old, bytes);
  return g_libc.reallocarray(old, c, n);
}
HEAPLAB_EXPORT void* memalign(size_t a, size_t n) {
  void* p;
  return early(n, a, &p) ? p : g_libc.memalign(a, n);
}
HEAPLAB_EXPORT void* aligned_alloc(size_t a, size_t n) {
  void* p;
  return early(n, a, &p) ? p : g_libc.aligned_alloc(a, n);
}
HEAPLAB_EXPORT int posix_memalign(void** out, size_t a, size_t n) {
  if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != 2) {
    resolve();
    if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != 2) {  // while the lookup runs
      if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
      void* p = arena_alloc(n, a);
      if (!p) return ENOMEM;
      *out = p;
      return 0;
    }
  }
  return g_libc.posix_memalign(out, a, n);
}
HEAPLAB_EXPORT void* valloc(size_t n) {
  void* p;
  return early(n, 4096, &p) ? p : g_libc.valloc(n);
}
HEAPLAB_EXPORT void* pvalloc(size_t n) {
  void* p;
  return early(n, 4096, &p) ? p : g_libc.pvalloc(n);
}
HEAPLAB_EXPORT size_t malloc_usable_size(void* p) {
  if (!p) return 0;
  if (in_arena(p)) return arena_size(p);
  ready();
  return g_libc.malloc_usable_size(p);
}
// Where the forwarder found glibc's malloc (linked_test checks it is libc.so.6).
HEAPLAB_EXPORT const char* heaplab_glibc_forward_source() {
  resolve();
  return g_libc_path ? g_libc_path : "";
}

}  // extern "C"

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
HEAPLAB_EXPORT void operator delete(void* p) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete[](void* p) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete(void* p, size_t) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete[](void* p, size_t) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete(void* p, std::align_val_t) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete(void* p, size_t, std::align_val_t) noexcept { release(p); }
HEAPLAB_EXPORT void operator delete[](void* p, size_t, std::align_val_t) noexcept { release(p); }
