// What each interposed call does: forward to the next definition in the
// chain and emit one event. Allocations are stamped after the real call,
// releases before it (raw_format.h). Included only by interpose.cpp, whose
// extern "C" and operator definitions are one-line forwards to these.
#pragma once

#include <sys/types.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "capture/format/event.h"
#include "capture/shim/memory.h"
#include "capture/shim/sink.h"

// The stack a new process's child handler runs on (clone(3)'s wrapper and
// the syscall entry): the child's private copy of it, for its one thread,
// since the stack the child was given may be small.
extern "C" __attribute__((visibility("hidden"))) char heaplab_clone_stack[64 * 1024];

namespace heaplab::shim {

using trace::Op;

struct Real {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void* (*reallocarray)(void*, size_t, size_t);
  void* (*memalign)(size_t, size_t);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  // operator new / delete of the next library (an allocator that defines
  // them), indexed by Op - Op::op_new / Op - Op::op_delete. nullptr: emulate
  // over the C functions, exactly as libstdc++'s own definitions do, so that
  // a `new` is one event and not `new` plus the `malloc` it turns into.
  void* new_[8];
  void* delete_[12];
};

extern Real g_real;
extern int g_state;  // 0 not initialised, 1 initialising, 2 ready
extern char g_boot[];
extern const size_t g_boot_size;

void init();
// _Fork (glibc 2.34): a fork that runs no atfork handlers, so the shim's
// child handler runs here; else the child would write into its parent's
// blocks, and with --follow-fork its calls would be lost. (glibc's own
// fork() calls its internal _Fork, not this one.)
pid_t hook_fork_without_handlers();
// Forks that bypass glibc's fork() altogether, followed the same way (the
// child runs the shim's child handler before anything else): syscall(2)
// of SYS_fork, or of SYS_clone/SYS_clone3 making a process on the same
// stack; and clone(3) without CLONE_VM, whose child function is wrapped.
// Clones that share memory (threads, vfork, posix_spawn) pass untouched.
long hook_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5);
// The child of a raw clone making a process on a stack of its own (called
// by interpose.cpp's syscall entry, on heaplab_clone_stack): as a fork child.
void hook_clone_child();
int hook_clone(int (*fn)(void*), void* stack, int flags, void* arg, void* ptid, void* tls, void* ctid);
// During initialisation (dlsym allocates), memory comes from a static arena.
void* boot_alloc(size_t n, size_t align);
inline bool boot_owns(const void* p) { return uintptr_t(p) - uintptr_t(g_boot) < g_boot_size; }

// Returns true and sets *out if the call must be served from the boot arena.
inline bool not_ready(size_t n, size_t align, void** out) {
  if (__builtin_expect(__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == 2, 1)) return false;
  init();
  if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == 2) return false;
  *out = boot_alloc(n, align);  // this thread is inside init()
  return true;
}

inline uint64_t u(const void* p) { return reinterpret_cast<uint64_t>(p); }

// One call in g_latency_every: `call` timed inside the allocator; `record`
// (the call's own event) before the latency record that follows it.
#define HEAPLAB_TIMED_CALL(call, record)         \
  do {                                           \
    if (__builtin_expect(latency_sample(), 0)) { \
      const uint64_t t0_ = timer_begin();        \
      call;                                      \
      const uint64_t t1_ = timer_end();          \
      record;                                    \
      emit(raw::kRawLatency, t1_ - t0_, 0, 0);   \
    } else {                                     \
      call;                                      \
      record;                                    \
    }                                            \
  } while (0)
inline uint32_t op(Op o) { return static_cast<uint32_t>(o); }

inline void* hook_malloc(size_t n) {
  void* p;
  if (not_ready(n, 16, &p)) return p;
  HEAPLAB_TIMED_CALL(p = g_real.malloc(n), emit(op(Op::malloc), u(p), n, 0));
  if (__builtin_expect(n >= raw::kResidentMinBytes, 0)) large_made(p, n);
  return p;
}

inline void* hook_calloc(size_t count, size_t n) {
  void* p;
  size_t total;
  if (not_ready(__builtin_mul_overflow(count, n, &total) ? SIZE_MAX : total, 16, &p)) return p;
  HEAPLAB_TIMED_CALL(p = g_real.calloc(count, n), emit(op(Op::calloc), u(p), n, count));
  if (__builtin_expect(total >= raw::kResidentMinBytes, 0)) large_made(p, total);
  return p;
}

inline void hook_free(void* p) {
  if (__builtin_expect(boot_owns(p), 0)) return;  // never freed: it is static
  void* unused;
  if (not_ready(0, 0, &unused)) return;
  large_released(p);
  // A release is stamped before the call (its record first, then the timed call).
  emit(op(Op::free), u(p), 0, 0);
  HEAPLAB_TIMED_CALL(g_real.free(p), (void)0);
}

void* boot_realloc(void* old, size_t n);

inline void* hook_realloc(void* old, size_t n) {
  void* p;
  if (__builtin_expect(boot_owns(old), 0)) return boot_realloc(old, n);
  if (not_ready(n, 16, &p)) return p;  // (before start-up ends, `old` is NULL or boot memory)
  large_released(old);
  emit(raw::kRawReallocBegin, u(old), n, 0);
  HEAPLAB_TIMED_CALL(p = g_real.realloc(old, n), emit(op(Op::realloc), u(p), u(old), n));
  if (__builtin_expect(n >= raw::kResidentMinBytes, 0)) large_made(p, n);
  return p;
}

inline void* hook_reallocarray(void* old, size_t count, size_t n) {
  void* p;
  size_t total;
  if (__builtin_mul_overflow(count, n, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (__builtin_expect(boot_owns(old), 0)) return boot_realloc(old, total);
  if (not_ready(total, 16, &p)) return p;
  large_released(old);
  emit(raw::kRawReallocarrayBegin, u(old), n, count);
  p = g_real.reallocarray(old, count, n);
  emit(op(Op::reallocarray), u(p), u(old), count);
  if (__builtin_expect(total >= raw::kResidentMinBytes, 0)) large_made(p, total);
  return p;
}

inline void* hook_memalign(size_t align, size_t n) {
  void* p;
  if (not_ready(n, align, &p)) return p;
  HEAPLAB_TIMED_CALL(p = g_real.memalign(align, n), emit(op(Op::memalign), u(p), n, align));
  if (__builtin_expect(n >= raw::kResidentMinBytes, 0)) large_made(p, n);
  return p;
}

inline int hook_posix_memalign(void** out, size_t align, size_t n) {
  void* p;
  if (not_ready(n, align, &p)) {
    *out = p;
    return 0;
  }
  int rc = g_real.posix_memalign(out, align, n);
  emit(op(Op::posix_memalign), rc == 0 ? u(*out) : 0, n, align);
  if (__builtin_expect(rc == 0 && n >= raw::kResidentMinBytes, 0)) large_made(*out, n);
  return rc;
}

inline void* hook_aligned_alloc(size_t align, size_t n) {
  void* p;
  if (not_ready(n, align, &p)) return p;
  HEAPLAB_TIMED_CALL(p = g_real.aligned_alloc(align, n), emit(op(Op::aligned_alloc), u(p), n, align));
  if (__builtin_expect(n >= raw::kResidentMinBytes, 0)) large_made(p, n);
  return p;
}

inline void* hook_valloc(size_t n) {
  void* p;
  if (not_ready(n, 4096, &p)) return p;
  p = g_real.valloc(n);
  emit(op(Op::valloc), u(p), n, 0);
  if (__builtin_expect(n >= raw::kResidentMinBytes, 0)) large_made(p, n);
  return p;
}

inline void* hook_pvalloc(size_t n) {
  void* p;
  if (not_ready(n, 4096, &p)) return p;
  p = g_real.pvalloc(n);
  emit(op(Op::pvalloc), u(p), n, 0);
  if (__builtin_expect(n >= raw::kResidentMinBytes, 0)) large_made(p, n);
  return p;
}

// C++ operators. `kind` is the Op; `align` 0 for the unaligned forms; `nt`
// the nothrow_t argument of the nothrow forms (passed on), else nullptr.
void* new_emulated(size_t n, size_t align);  // nullptr on failure
[[noreturn]] void throw_bad_alloc();

inline void* call_new(Op kind, size_t n, size_t align, const void* nt) {
  void* p;
  void* next = g_real.new_[op(kind) - op(Op::op_new)];
  if (next == nullptr) {
    p = new_emulated(n, align);
    if (!p && !nt) {  // record the failure, then throw as libstdc++ would
      emit(op(kind), 0, n, align);
      throw_bad_alloc();
    }
  } else if (align == 0 && nt == nullptr)
    p = reinterpret_cast<void* (*)(size_t)>(next)(n);
  else if (align == 0)
    p = reinterpret_cast<void* (*)(size_t, const void*)>(next)(n, nt);
  else if (nt == nullptr)
    p = reinterpret_cast<void* (*)(size_t, size_t)>(next)(n, align);
  else
    p = reinterpret_cast<void* (*)(size_t, size_t, const void*)>(next)(n, align, nt);
  return p;
}

inline void* hook_new(Op kind, size_t n, size_t align, const void* nt) {
  void* p;
  if (not_ready(n, align ? align : 16, &p)) return p;
  HEAPLAB_TIMED_CALL(p = call_new(kind, n, align, nt), emit(op(kind), u(p), n, align));
  if (__builtin_expect(n >= raw::kResidentMinBytes, 0)) large_made(p, n);
  return p;
}

inline void call_delete(Op kind, void* p, size_t n, size_t align, const void* nt);

inline void hook_delete(Op kind, void* p, size_t n, size_t align, const void* nt) {
  if (__builtin_expect(boot_owns(p), 0)) return;
  void* unused;
  if (not_ready(0, 0, &unused)) return;
  large_released(p);
  emit(op(kind), u(p), n, align);
  HEAPLAB_TIMED_CALL(call_delete(kind, p, n, align, nt), (void)0);
}

inline void call_delete(Op kind, void* p, size_t n, size_t align, const void* nt) {
  void* next = g_real.delete_[op(kind) - op(Op::op_delete)];
  if (next == nullptr) {
    g_real.free(p);
    return;
  }
  // Each form takes (ptr[, size][, align][, nothrow]): pass what it has.
  const trace::OpInfo& info = trace::op_info(kind);
  bool sized = info.fields & trace::kSize, aligned = info.fields & trace::kAlign;
  if (sized && aligned)
    reinterpret_cast<void (*)(void*, size_t, size_t)>(next)(p, n, align);
  else if (sized)
    reinterpret_cast<void (*)(void*, size_t)>(next)(p, n);
  else if (aligned && nt)
    reinterpret_cast<void (*)(void*, size_t, const void*)>(next)(p, align, nt);
  else if (aligned)
    reinterpret_cast<void (*)(void*, size_t)>(next)(p, align);
  else if (nt)
    reinterpret_cast<void (*)(void*, const void*)>(next)(p, nt);
  else
    reinterpret_cast<void (*)(void*)>(next)(p);
}

}  // namespace heaplab::shim
