// The allocator backend interface of the replayer.
//
// A backend is a struct of static functions, one per call the trace format
// records, passed as a template argument to the replay engine
// (replay/engine.h), so that each call is a direct call with no dispatch of
// heaplab's own. The concept `Backend` below states it exactly; every
// backend header ends with a static_assert of it.
//
// `LibcApi` implements every call with the process's C and C++ allocation
// functions; that is the backend of the preload mode (whatever LD_PRELOAD
// put first answers) and of glibc. A backend for an allocator's native API
// derives from it and replaces what the allocator does better: sized and
// aligned frees, aligned allocation, statistics.
//
// Calls that throw (operator new) may throw std::bad_alloc or return NULL;
// the engine records either as a NULL result.
//
// Backends depend on nothing above them: the replayers that run them
// (heaplab-replay, heaplab-replay-NAME) are made in replay/ from the backend
// header alone. Adding an allocator: allocators/README.md, "Adding an
// allocator".
#pragma once

#include <malloc.h>
#include <stdlib.h>

#include <concepts>
#include <cstddef>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

namespace heaplab::allocators {

// The optional functions of LibcApi (see init()).
struct LibcOptional {
  void* (*memalign)(size_t, size_t) = ::memalign;
  int (*posix_memalign)(void**, size_t, size_t) = ::posix_memalign;
  void* (*aligned_alloc)(size_t, size_t) = ::aligned_alloc;
  void* (*valloc)(size_t) = ::valloc;
  void* (*pvalloc)(size_t) = ::pvalloc;
  void* (*reallocarray)(void*, size_t, size_t) = ::reallocarray;
};

struct LibcApi {
  // Before the replay: finds which optional functions (memalign,
  // posix_memalign, aligned_alloc, valloc, pvalloc, reallocarray) the
  // library answering malloc does not define itself, and builds those from
  // the ones it has. Otherwise glibc's would answer (jemalloc has no pvalloc)
  // and the block would later be freed into the wrong heap.
  static void init();
  static nlohmann::json describe();
  static nlohmann::json stats();

  static inline LibcOptional optional;

  static void* malloc(size_t n) { return ::malloc(n); }
  static void* calloc(size_t c, size_t n) { return ::calloc(c, n); }
  static void* realloc(void* p, size_t n) { return ::realloc(p, n); }
  static void* reallocarray(void* p, size_t c, size_t n) { return optional.reallocarray(p, c, n); }
  static void free(void* p) { ::free(p); }
  static void* memalign(size_t a, size_t n) { return optional.memalign(a, n); }
  static int posix_memalign(void** p, size_t a, size_t n) { return optional.posix_memalign(p, a, n); }
  static void* aligned_alloc(size_t a, size_t n) { return optional.aligned_alloc(a, n); }
  static void* valloc(size_t n) { return optional.valloc(n); }
  static void* pvalloc(size_t n) { return optional.pvalloc(n); }

  static void* op_new(size_t n) { return ::operator new(n); }
  static void* op_new_array(size_t n) { return ::operator new[](n); }
  static void* op_new_nothrow(size_t n) { return ::operator new(n, std::nothrow); }
  static void* op_new_array_nothrow(size_t n) { return ::operator new[](n, std::nothrow); }
  static void* op_new_aligned(size_t n, size_t a) { return ::operator new(n, std::align_val_t(a)); }
  static void* op_new_array_aligned(size_t n, size_t a) { return ::operator new[](n, std::align_val_t(a)); }
  static void* op_new_aligned_nothrow(size_t n, size_t a) {
    return ::operator new(n, std::align_val_t(a), std::nothrow);
  }
  static void* op_new_array_aligned_nothrow(size_t n, size_t a) {
    return ::operator new[](n, std::align_val_t(a), std::nothrow);
  }

  static void op_delete(void* p) { ::operator delete(p); }
  static void op_delete_array(void* p) { ::operator delete[](p); }
  static void op_delete_sized(void* p, size_t n) { ::operator delete(p, n); }
  static void op_delete_array_sized(void* p, size_t n) { ::operator delete[](p, n); }
  static void op_delete_aligned(void* p, size_t a) { ::operator delete(p, std::align_val_t(a)); }
  static void op_delete_array_aligned(void* p, size_t a) { ::operator delete[](p, std::align_val_t(a)); }
  static void op_delete_sized_aligned(void* p, size_t n, size_t a) { ::operator delete(p, n, std::align_val_t(a)); }
  static void op_delete_array_sized_aligned(void* p, size_t n, size_t a) {
    ::operator delete[](p, n, std::align_val_t(a));
  }
  static void op_delete_nothrow(void* p) { ::operator delete(p, std::nothrow); }
  static void op_delete_array_nothrow(void* p) { ::operator delete[](p, std::nothrow); }
  static void op_delete_aligned_nothrow(void* p, size_t a) { ::operator delete(p, std::align_val_t(a), std::nothrow); }
  static void op_delete_array_aligned_nothrow(void* p, size_t a) {
    ::operator delete[](p, std::align_val_t(a), std::nothrow);
  }
};

// The calls a backend makes for the replay engine, one per trace op, with
// the op's arguments in the order of the C and C++ functions.
template <class B>
concept BackendCalls = requires(void* p, void** out, size_t n, size_t c, size_t a) {
  { B::malloc(n) } -> std::same_as<void*>;
  { B::calloc(c, n) } -> std::same_as<void*>;
  { B::realloc(p, n) } -> std::same_as<void*>;
  { B::reallocarray(p, c, n) } -> std::same_as<void*>;
  { B::free(p) } -> std::same_as<void>;
  { B::memalign(a, n) } -> std::same_as<void*>;
  { B::posix_memalign(out, a, n) } -> std::same_as<int>;
  { B::aligned_alloc(a, n) } -> std::same_as<void*>;
  { B::valloc(n) } -> std::same_as<void*>;
  { B::pvalloc(n) } -> std::same_as<void*>;
  { B::op_new(n) } -> std::same_as<void*>;
  { B::op_new_array(n) } -> std::same_as<void*>;
  { B::op_new_nothrow(n) } -> std::same_as<void*>;
  { B::op_new_array_nothrow(n) } -> std::same_as<void*>;
  { B::op_new_aligned(n, a) } -> std::same_as<void*>;
  { B::op_new_array_aligned(n, a) } -> std::same_as<void*>;
  { B::op_new_aligned_nothrow(n, a) } -> std::same_as<void*>;
  { B::op_new_array_aligned_nothrow(n, a) } -> std::same_as<void*>;
  { B::op_delete(p) } -> std::same_as<void>;
  { B::op_delete_array(p) } -> std::same_as<void>;
  { B::op_delete_sized(p, n) } -> std::same_as<void>;
  { B::op_delete_array_sized(p, n) } -> std::same_as<void>;
  { B::op_delete_aligned(p, a) } -> std::same_as<void>;
  { B::op_delete_array_aligned(p, a) } -> std::same_as<void>;
  { B::op_delete_sized_aligned(p, n, a) } -> std::same_as<void>;
  { B::op_delete_array_sized_aligned(p, n, a) } -> std::same_as<void>;
  { B::op_delete_nothrow(p) } -> std::same_as<void>;
  { B::op_delete_array_nothrow(p) } -> std::same_as<void>;
  { B::op_delete_aligned_nothrow(p, a) } -> std::same_as<void>;
  { B::op_delete_array_aligned_nothrow(p, a) } -> std::same_as<void>;
};

// A whole backend: the calls, plus
//   kName       its name in results ("jemalloc")
//   init()      called once before the replay threads start
//   describe()  {"version", "library", "build_id", ...}
//   stats()     the allocator's own statistics
// and optionally `using Direct = OtherBackend;` with a static
// `load(path)`: the backend that a --direct-library PATH loads instead.
template <class B>
concept Backend = BackendCalls<B> && requires {
  { B::kName } -> std::convertible_to<const char*>;
  { B::init() } -> std::same_as<void>;
  { B::describe() } -> std::same_as<nlohmann::json>;
  { B::stats() } -> std::same_as<nlohmann::json>;
};

// A backend that can load a custom library given by path (System).
template <class B>
concept LoadsDirectLibrary = Backend<B> && requires(const std::string& path) {
  typename B::Direct;
  requires Backend<typename B::Direct>;
  { B::Direct::load(path) } -> std::same_as<void>;
};

static_assert(BackendCalls<LibcApi>);

// Facts about the allocator that answers `malloc`, found at
// run time: the library that defines it (dladdr), its GNU build id (from the
// loaded image's notes), and its version and statistics through whichever
// native API it exports (mallctl, mi_version/mi_process_info,
// tc_version/MallocExtension_GetNumericProperty, glibc's mallinfo2).
// `handle` is RTLD_DEFAULT (the process's malloc) or a dlopen handle.
nlohmann::json describe_allocator(void* handle);
nlohmann::json allocator_stats(void* handle);

// The GNU build id of the loaded object whose path is `path` (hex), or "".
std::string loaded_build_id(const std::string& path);

}  // namespace heaplab::allocators
