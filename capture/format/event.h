// The heap event model shared by every part of heaplab.
// Depends on nothing but the C++ standard library.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

namespace heaplab::trace {

// Every call the trace format records. The numeric values are part of the file
// format (FORMAT.md, "Operation codes"): never renumber. A new op code is a
// new major format version, since older readers cannot know its fields.
enum class Op : uint8_t {
  malloc = 0,
  calloc = 1,
  realloc = 2,
  reallocarray = 3,
  free = 4,
  memalign = 5,
  posix_memalign = 6,
  aligned_alloc = 7,
  valloc = 8,
  pvalloc = 9,
  op_new = 10,                  // operator new(size_t)
  op_new_array = 11,            // operator new[](size_t)
  op_new_nothrow = 12,          // operator new(size_t, nothrow_t)
  op_new_array_nothrow = 13,    // operator new[](size_t, nothrow_t)
  op_new_aligned = 14,          // operator new(size_t, align_val_t)
  op_new_array_aligned = 15,    // operator new[](size_t, align_val_t)
  op_new_aligned_nothrow = 16,  // operator new(size_t, align_val_t, nothrow_t)
  op_new_array_aligned_nothrow = 17,
  op_delete = 18,        // operator delete(void*)
  op_delete_array = 19,  // operator delete[](void*)
  op_delete_sized = 20,  // operator delete(void*, size_t)
  op_delete_array_sized = 21,
  op_delete_aligned = 22,  // operator delete(void*, align_val_t)
  op_delete_array_aligned = 23,
  op_delete_sized_aligned = 24,  // operator delete(void*, size_t, align_val_t)
  op_delete_array_sized_aligned = 25,
  op_delete_nothrow = 26,  // operator delete(void*, nothrow_t)
  op_delete_array_nothrow = 27,
  op_delete_aligned_nothrow = 28,  // operator delete(void*, align_val_t, nothrow_t)
  op_delete_array_aligned_nothrow = 29,
  thread_start = 30,
  thread_end = 31,
  lost = 32,  // `count` events were lost here (capture overflow)
};

inline constexpr unsigned kOpCount = 33;

// Which fields an operation carries. Fields an op does not carry are zero.
enum OpField : uint8_t {
  kProduces = 1u << 0,  // returns a new object: `id`
  kConsumes = 1u << 1,  // takes a pointer: `old` (0 = NULL)
  kSize = 1u << 2,      // `size`
  kAlign = 1u << 3,     // `align`
  kCount = 1u << 4,     // `count` (calloc/reallocarray element count, lost events)
};

struct OpInfo {
  std::string_view name;
  uint8_t fields;
};

inline constexpr OpInfo kOpInfo[kOpCount] = {
    {"malloc", kProduces | kSize},
    {"calloc", kProduces | kSize | kCount},
    {"realloc", kProduces | kConsumes | kSize},
    {"reallocarray", kProduces | kConsumes | kSize | kCount},
    {"free", kConsumes},
    {"memalign", kProduces | kSize | kAlign},
    {"posix_memalign", kProduces | kSize | kAlign},
    {"aligned_alloc", kProduces | kSize | kAlign},
    {"valloc", kProduces | kSize},
    {"pvalloc", kProduces | kSize},
    {"new", kProduces | kSize},
    {"new[]", kProduces | kSize},
    {"new_nothrow", kProduces | kSize},
    {"new[]_nothrow", kProduces | kSize},
    {"new_aligned", kProduces | kSize | kAlign},
    {"new[]_aligned", kProduces | kSize | kAlign},
    {"new_aligned_nothrow", kProduces | kSize | kAlign},
    {"new[]_aligned_nothrow", kProduces | kSize | kAlign},
    {"delete", kConsumes},
    {"delete[]", kConsumes},
    {"delete_sized", kConsumes | kSize},
    {"delete[]_sized", kConsumes | kSize},
    {"delete_aligned", kConsumes | kAlign},
    {"delete[]_aligned", kConsumes | kAlign},
    {"delete_sized_aligned", kConsumes | kSize | kAlign},
    {"delete[]_sized_aligned", kConsumes | kSize | kAlign},
    {"delete_nothrow", kConsumes},
    {"delete[]_nothrow", kConsumes},
    {"delete_aligned_nothrow", kConsumes | kAlign},
    {"delete[]_aligned_nothrow", kConsumes | kAlign},
    {"thread_start", 0},
    {"thread_end", 0},
    {"lost", kCount},
};

constexpr bool op_valid(unsigned op) { return op < kOpCount; }
constexpr const OpInfo& op_info(Op op) { return kOpInfo[static_cast<unsigned>(op)]; }
constexpr std::string_view op_name(Op op) { return op_info(op).name; }
constexpr bool op_produces(Op op) { return op_info(op).fields & kProduces; }
constexpr bool op_consumes(Op op) { return op_info(op).fields & kConsumes; }
constexpr bool op_has(Op op, OpField f) { return op_info(op).fields & f; }
// An alignment `op`'s call takes: a power of two, and for posix_memalign
// also a multiple of sizeof(void*) (it fails with EINVAL otherwise; glibc's
// memalign and aligned_alloc round other alignments up, some allocators
// crash on them).
constexpr bool alignment_taken(Op op, uint64_t align) {
  return std::has_single_bit(align) && (op != Op::posix_memalign || align >= sizeof(void*));
}
// The alignment a replay gives a call whose own was not taken (its result
// in the trace says the program's call succeeded): the next one taken.
constexpr uint64_t alignment_for_replay(Op op, uint64_t align) {
  if (alignment_taken(op, align)) return align;
  const uint64_t a = align > (uint64_t{1} << 63) ? uint64_t{1} << 63 : std::bit_ceil(align);
  return op == Op::posix_memalign && a < sizeof(void*) ? sizeof(void*) : a;
}

inline std::optional<Op> op_from_name(std::string_view name) {
  for (unsigned i = 0; i < kOpCount; ++i)
    if (kOpInfo[i].name == name) return static_cast<Op>(i);
  return std::nullopt;
}

// Event flags (stored in the top bits of the op byte, see FORMAT.md).
enum EventFlag : uint8_t {
  kNullResult = 1u << 0,  // a producing call returned NULL: no object, id == 0
  kFailed = 1u << 1,      // the call reported failure (NULL/ENOMEM/EINVAL); implies kNullResult
};

// One decoded event. Object ids are dense (1, 2, 3, ... in global order of
// creation) and never reused; 0 means "none" / NULL.
struct Event {
  uint64_t seq = 0;     // position in the global order, 0-based, unique
  uint64_t time = 0;    // nanoseconds since capture start; 0 when the trace has no clock
  uint64_t id = 0;      // object produced (producing ops), 0 = none
  uint64_t old = 0;     // object consumed (consuming ops), 0 = NULL pointer
  uint64_t size = 0;    // requested size (element size for calloc/reallocarray)
  uint64_t align = 0;   // requested alignment
  uint64_t count = 0;   // element count (calloc, reallocarray) or lost events (lost)
  uint32_t thread = 0;  // dense thread index, see the trace's thread table
  Op op = Op::malloc;
  uint8_t flags = 0;

  bool operator==(const Event&) const = default;

  // Bytes the object produced by this event occupies as requested by the
  // program: size, or count*size (saturating) for calloc/reallocarray.
  uint64_t requested_bytes() const {
    if (!op_has(op, kCount) || !op_produces(op)) return size;
    uint64_t p;
    return __builtin_mul_overflow(count, size, &p) ? UINT64_MAX : p;
  }
};

}  // namespace heaplab::trace
