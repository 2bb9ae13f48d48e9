/* A test allocator with known behaviour: glibc's heap (through its
 * __libc_* entry points), except that
 *   - requests above HEAPLAB_TEST_NULL_ABOVE bytes (if set) return NULL
 *     with errno ENOMEM, and
 *   - the Nth malloc aborts if HEAPLAB_TEST_ABORT_AT=N is set (an allocator
 *     that crashes), and
 *   - the Nth malloc never returns if HEAPLAB_TEST_HANG_AT=N is set (an
 *     allocator that deadlocks), and
 *   - built with HEAPLAB_TEST_PAD=N (test_alloc_padded), every block is N
 *     bytes bigger than asked for: a build of an allocator whose heap
 *     regressed, for the CI gate's test.
 * It lacks reallocarray, valloc, pvalloc and the C++ operators on purpose:
 * the direct load mode builds those from what it has. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void __libc_free(void*);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

#ifndef HEAPLAB_TEST_PAD
#define HEAPLAB_TEST_PAD 0
#endif

static size_t limit(void) {
  static size_t cached = 0;
  static int read = 0;
  if (!read) {
    const char* v = getenv("HEAPLAB_TEST_NULL_ABOVE");
    cached = v ? (size_t)strtoull(v, NULL, 10) : SIZE_MAX;
    read = 1;
  }
  return cached;
}

static int too_big(size_t n) {
  if (n > limit()) {
    errno = ENOMEM;
    return 1;
  }
  return 0;
}

static void maybe_abort(void) {
  static long n = 0, at = -1;
  if (at < 0) {
    const char* v = getenv("HEAPLAB_TEST_ABORT_AT");
    at = v ? atol(v) : 0;
  }
  if (at > 0 && __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED) == at) abort();
  static long m = 0, hang = -1;
  if (hang < 0) {
    const char* v = getenv("HEAPLAB_TEST_HANG_AT");
    hang = v ? atol(v) : 0;
  }
  if (hang > 0 && __atomic_add_fetch(&m, 1, __ATOMIC_RELAXED) == hang)
    for (;;) pause();
}

void* malloc(size_t n) {
  maybe_abort();
  return too_big(n) ? NULL : __libc_malloc(n + HEAPLAB_TEST_PAD);
}
void free(void* p) { __libc_free(p); }
void* calloc(size_t c, size_t n) {
  size_t b;
  if (__builtin_mul_overflow(c, n, &b) || too_big(b)) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_calloc(1, b + HEAPLAB_TEST_PAD);
}
void* realloc(void* p, size_t n) {
  /* realloc(p, 0) frees p, as glibc's does: padded or not. */
  return too_big(n) ? NULL : __libc_realloc(p, n ? n + HEAPLAB_TEST_PAD : 0);
}
void* memalign(size_t a, size_t n) { return too_big(n) ? NULL : __libc_memalign(a, n + HEAPLAB_TEST_PAD); }
void* aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
  void* p = memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
