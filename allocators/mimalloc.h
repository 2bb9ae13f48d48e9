// mimalloc, linked directly: every call through its mi_* API, including the
// sized and aligned frees (mi_free_size, mi_free_size_aligned) and its C++
// allocation functions (mi_new*), which throw std::bad_alloc on failure.
#pragma once

#include <mimalloc.h>

#include "allocators/backend.h"

namespace heaplab::allocators {

struct Mimalloc : LibcApi {
  static constexpr const char* kName = "mimalloc";
  static void* malloc(size_t n) { return mi_malloc(n); }
  static void* calloc(size_t c, size_t n) { return mi_calloc(c, n); }
  static void* realloc(void* p, size_t n) { return mi_realloc(p, n); }
  static void* reallocarray(void* p, size_t c, size_t n) { return mi_reallocarray(p, c, n); }
  static void free(void* p) { mi_free(p); }
  static void* memalign(size_t a, size_t n) { return mi_memalign(a, n); }
  static int posix_memalign(void** p, size_t a, size_t n) { return mi_posix_memalign(p, a, n); }
  static void* aligned_alloc(size_t a, size_t n) { return mi_aligned_alloc(a, n); }
  static void* valloc(size_t n) { return mi_valloc(n); }
  static void* pvalloc(size_t n) { return mi_pvalloc(n); }
  static void* op_new(size_t n) { return mi_new(n); }
  static void* op_new_array(size_t n) { return mi_new(n); }
  static void* op_new_nothrow(size_t n) { return mi_new_nothrow(n); }
  static void* op_new_array_nothrow(size_t n) { return mi_new_nothrow(n); }
  static void* op_new_aligned(size_t n, size_t a) { return mi_new_aligned(n, a); }
  static void* op_new_array_aligned(size_t n, size_t a) { return mi_new_aligned(n, a); }
  static void* op_new_aligned_nothrow(size_t n, size_t a) { return mi_new_aligned_nothrow(n, a); }
  static void* op_new_array_aligned_nothrow(size_t n, size_t a) { return mi_new_aligned_nothrow(n, a); }
  static void op_delete(void* p) { mi_free(p); }
  static void op_delete_array(void* p) { mi_free(p); }
  static void op_delete_sized(void* p, size_t n) { mi_free_size(p, n); }
  static void op_delete_array_sized(void* p, size_t n) { mi_free_size(p, n); }
  static void op_delete_aligned(void* p, size_t a) { mi_free_aligned(p, a); }
  static void op_delete_array_aligned(void* p, size_t a) { mi_free_aligned(p, a); }
  static void op_delete_sized_aligned(void* p, size_t n, size_t a) { mi_free_size_aligned(p, n, a); }
  static void op_delete_array_sized_aligned(void* p, size_t n, size_t a) { mi_free_size_aligned(p, n, a); }
  static void op_delete_nothrow(void* p) { mi_free(p); }
  static void op_delete_array_nothrow(void* p) { mi_free(p); }
  static void op_delete_aligned_nothrow(void* p, size_t a) { mi_free_aligned(p, a); }
  static void op_delete_array_aligned_nothrow(void* p, size_t a) { mi_free_aligned(p, a); }
};
static_assert(Backend<Mimalloc>);

}  // namespace heaplab::allocators
