// tcmalloc (gperftools), linked directly: every call through its tc_* API,
// including sized deletes (tc_delete_sized, which skip the page map lookup)
// and the aligned operators.
#pragma once

#include <gperftools/tcmalloc.h>

#include <cerrno>

#include "allocators/backend.h"

namespace heaplab::allocators {

struct Tcmalloc : LibcApi {
  static constexpr const char* kName = "tcmalloc";
  static void* malloc(size_t n) { return tc_malloc(n); }
  static void* calloc(size_t c, size_t n) { return tc_calloc(c, n); }
  static void* realloc(void* p, size_t n) { return tc_realloc(p, n); }
  static void* reallocarray(void* p, size_t c, size_t n) {  // gperftools has none
    size_t bytes;
    if (__builtin_mul_overflow(c, n, &bytes)) {
      errno = ENOMEM;
      return nullptr;
    }
    return tc_realloc(p, bytes);
  }
  static void free(void* p) { tc_free(p); }
  static void* memalign(size_t a, size_t n) { return tc_memalign(a, n); }
  static int posix_memalign(void** p, size_t a, size_t n) { return tc_posix_memalign(p, a, n); }
  static void* aligned_alloc(size_t a, size_t n) { return tc_memalign(a, n); }
  static void* valloc(size_t n) { return tc_valloc(n); }
  static void* pvalloc(size_t n) { return tc_pvalloc(n); }
  static void* op_new(size_t n) { return tc_new(n); }
  static void* op_new_array(size_t n) { return tc_newarray(n); }
  static void* op_new_nothrow(size_t n) { return tc_new_nothrow(n, std::nothrow); }
  static void* op_new_array_nothrow(size_t n) { return tc_newarray_nothrow(n, std::nothrow); }
  static void* op_new_aligned(size_t n, size_t a) { return tc_new_aligned(n, std::align_val_t(a)); }
  static void* op_new_array_aligned(size_t n, size_t a) { return tc_newarray_aligned(n, std::align_val_t(a)); }
  static void* op_new_aligned_nothrow(size_t n, size_t a) {
    return tc_new_aligned_nothrow(n, std::align_val_t(a), std::nothrow);
  }
  static void* op_new_array_aligned_nothrow(size_t n, size_t a) {
    return tc_newarray_aligned_nothrow(n, std::align_val_t(a), std::nothrow);
  }
  static void op_delete(void* p) { tc_delete(p); }
  static void op_delete_array(void* p) { tc_deletearray(p); }
  static void op_delete_sized(void* p, size_t n) { tc_delete_sized(p, n); }
  static void op_delete_array_sized(void* p, size_t n) { tc_deletearray_sized(p, n); }
  static void op_delete_aligned(void* p, size_t a) { tc_delete_aligned(p, std::align_val_t(a)); }
  static void op_delete_array_aligned(void* p, size_t a) { tc_deletearray_aligned(p, std::align_val_t(a)); }
  static void op_delete_sized_aligned(void* p, size_t n, size_t a) {
    tc_delete_sized_aligned(p, n, std::align_val_t(a));
  }
  static void op_delete_array_sized_aligned(void* p, size_t n, size_t a) {
    tc_deletearray_sized_aligned(p, n, std::align_val_t(a));
  }
  static void op_delete_nothrow(void* p) { tc_delete_nothrow(p, std::nothrow); }
  static void op_delete_array_nothrow(void* p) { tc_deletearray_nothrow(p, std::nothrow); }
  static void op_delete_aligned_nothrow(void* p, size_t a) {
    tc_delete_aligned_nothrow(p, std::align_val_t(a), std::nothrow);
  }
  static void op_delete_array_aligned_nothrow(void* p, size_t a) {
    tc_deletearray_aligned_nothrow(p, std::align_val_t(a), std::nothrow);
  }
};
static_assert(Backend<Tcmalloc>);

}  // namespace heaplab::allocators
