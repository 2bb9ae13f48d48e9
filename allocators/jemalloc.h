// jemalloc, linked directly: sized and aligned frees through sdallocx and
// dallocx, aligned new through mallocx, so the size class lookup a sized
// delete lets jemalloc skip is skipped in the replay too.
#pragma once

#include <jemalloc/jemalloc.h>

#include "allocators/backend.h"

namespace heaplab::allocators {

struct Jemalloc : LibcApi {
  static constexpr const char* kName = "jemalloc";
  static int align_flag(size_t a) { return MALLOCX_LG_ALIGN(__builtin_ctzll(a)); }
  static bool pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }
  // mallocx and sdallocx take no size 0: jemalloc's own operators map it to 1.
  static void* op_new_aligned_nothrow(size_t n, size_t a) {
    return pow2(a) ? mallocx(n ? n : 1, align_flag(a)) : nullptr;
  }
  static void* op_new_array_aligned_nothrow(size_t n, size_t a) { return op_new_aligned_nothrow(n, a); }
  static void op_delete_sized(void* p, size_t n) {
    if (p) sdallocx(p, n ? n : 1, 0);
  }
  static void op_delete_array_sized(void* p, size_t n) { op_delete_sized(p, n); }
  static void op_delete_aligned(void* p, size_t a) {
    if (p) dallocx(p, pow2(a) ? align_flag(a) : 0);
  }
  static void op_delete_array_aligned(void* p, size_t a) { op_delete_aligned(p, a); }
  static void op_delete_aligned_nothrow(void* p, size_t a) { op_delete_aligned(p, a); }
  static void op_delete_array_aligned_nothrow(void* p, size_t a) { op_delete_aligned(p, a); }
  static void op_delete_sized_aligned(void* p, size_t n, size_t a) {
    if (p) sdallocx(p, n ? n : 1, pow2(a) ? align_flag(a) : 0);
  }
  static void op_delete_array_sized_aligned(void* p, size_t n, size_t a) { op_delete_sized_aligned(p, n, a); }
};
static_assert(Backend<Jemalloc>);

}  // namespace heaplab::allocators
