// The replay loop: one replay thread runs its steps against backend B.
//
// Objects live in a table of slots (a flat array; mmap'd by the caller,
// never from the allocator under test). A step names an object by its ref:
// slot and generation (replay/plan.h). A slot holds the pointer of its
// latest object and that object's generation in the top 16 bits; the
// thread that consumes an object loads its slot with acquire order and, if
// the slot does not hold the generation it names yet (the producer is
// another thread that has not got there), waits for it: spinning briefly,
// then yielding. A slot is reused only by the thread that consumed its last
// object, or after a handoff step that waits for that thread's progress.
// Those are the only synchronisation between replay threads, and the plan
// guarantees that they end (all waits are for steps earlier in the trace).
#pragma once

#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

#include "allocators/backend.h"
#include "capture/format/event.h"
#include "replay/histogram.h"
#include "replay/plan.h"
#include "replay/settings.h"

namespace heaplab::replay {

using Slot = std::atomic<uintptr_t>;
// A produced object whose call returned NULL in the replay (but not in the
// trace): consumers then pass NULL.
inline constexpr uintptr_t kNullObject = 1;
// A slot's value: pointer (x86-64 user addresses are below 2^47) | the
// generation of the ref that produced it << 48.
inline constexpr unsigned kValueGenerationShift = 48;
inline constexpr uintptr_t kPointerMask = (uintptr_t{1} << kValueGenerationShift) - 1;
inline constexpr uintptr_t slot_value(uintptr_t pointer, uint64_t ref) {
  return pointer | uintptr_t(ref_generation(ref)) << kValueGenerationShift;
}

struct ThreadResult {
  std::array<uint64_t, trace::kOpCount> calls{};
  std::array<uint64_t, trace::kOpCount> nulls{};       // NULL where the trace had a result
  std::array<uint64_t, trace::kOpCount> unexpected{};  // a result where the trace had NULL
  uint64_t moved_failed_reallocs = 0;                  // realloc failed in the trace, succeeded here
  std::array<uint64_t, kMemorySteps> memory{};         // the program's own memory steps made
  uint64_t memory_failed = 0;                          // of them, mmap/mremap/madvise/munmap that failed
  uint64_t waits = 0;                                  // consumes that waited for another thread
  uint64_t wait_ns = 0;
  uint64_t handoffs = 0;       // handoff steps made
  uint64_t handoff_waits = 0;  // of them, those that waited
  uint64_t handoff_wait_ns = 0;
  uint64_t unrepresentable = 0;  // results at or above 2^48 (counted as NULL)
  uint64_t remap_length = 0;     // the engine's: the last kStepArg's length
  uint64_t ext_old = 0;          // the engine's: the kStepExt for the next step (0, 0: none)
  uint64_t ext_arg = 0;
  uint32_t sample_countdown = 0;  // the engine's (latency): calls to the next timed one (0: from the first)
  uint64_t plan_waits = 0;        // windows of the plan not mapped yet when due
  uint64_t plan_wait_ns = 0;
  uint64_t start_ns = 0, end_ns = 0;  // end_ns: set by run_steps when the last call returned
  // run_steps stopped after a kStepNewThread (the caller starts the thread
  // that goes on, and clears it).
  bool new_thread = false;
  uint64_t threads_started = 0;      // threads started at kStepNewThread steps
  uint64_t threads_not_started = 0;  // of those steps, where none could start (this one went on)
  int cpu = -1;                      // the CPU the thread finished on
  // Steps done so far, for samplers while the replay runs.
  alignas(64) std::atomic<uint64_t> progress{0};
  char pad_[64 - sizeof(std::atomic<uint64_t>)];
};

inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

struct RunParams {
  Slot* table = nullptr;  // table[0] must hold kNullObject
  // Every replay thread's result, by replay thread (for handoff steps:
  // their progress).
  const ThreadResult* peers = nullptr;
  // Latency (run_steps<B, kPaced, true>): every `sample_every`-th call is
  // timed, from just before the allocator call to just after it returns
  // (not the wait for another thread's object, not the touch), in TSC ticks
  // (or ns with `tsc` false), less `timer_overhead`, into latency[op].
  LogLinearHistogram* latency = nullptr;
  uint32_t sample_every = 1;
  bool program_calls = false;  // time the steps flagged kStepProgramTimed instead of every Nth
  bool tsc = true;
  uint64_t timer_overhead = 0;
  Touch touch = Touch::pages;
  // Paced replay: step i does not start before start_ns + times[i] / speed.
  const uint64_t* times = nullptr;
  double speed = 1.0;
  uint64_t start_ns = 0;
  // The thread's first step, when its steps run in several calls (a pause
  // at the live peak): times[] and progress count from there. Null: from
  // the first step of this call.
  const PlanStep* origin = nullptr;
};

namespace detail {

// Spin briefly (the other thread is usually running on the other core),
// then yield (it may need this core), then sleep (it is far behind, or
// there are more replay threads than cores): 50 us at first, twice as long
// every 32 sleeps, up to 1 ms once the wait has passed about 50 ms. (A
// hundred threads waiting for one far behind, 50 us at a time, woke two
// million times a second and took the cores that one needed: a replay of
// 13.6 M calls took 76.7 s, now 4.0 s.)
inline void backoff(unsigned spins) {
  if (spins < 256) {
    __builtin_ia32_pause();
  } else if (spins < 4096) {
    sched_yield();
  } else {
    const unsigned doublings = std::min(5u, (spins - 4096) / 32);
    timespec ts{0, std::min(1000000L, 50000L << doublings)};
    nanosleep(&ts, nullptr);
  }
}

[[gnu::noinline, gnu::cold]] inline uintptr_t wait_for(Slot* table, uint64_t ref, ThreadResult& r) {
  const uint64_t t0 = monotonic_ns();
  const uint64_t want = ref_generation(ref);
  uintptr_t v;
  for (unsigned spins = 0;
       ((v = table[ref_slot(ref)].load(std::memory_order_acquire)) >> kValueGenerationShift) != want; ++spins)
    backoff(spins);
  ++r.waits;
  r.wait_ns += monotonic_ns() - t0;
  return v;
}

// table[0] holds kNullObject (generation 0): a NULL pointer in the trace
// (ref 0) needs no test.
inline void* obtain(Slot* table, uint64_t ref, ThreadResult& r) {
  uintptr_t v = table[ref_slot(ref)].load(std::memory_order_acquire);
  if (__builtin_expect((v >> kValueGenerationShift) != ref_generation(ref), 0)) v = wait_for(table, ref, r);
  v &= kPointerMask;
  return v == kNullObject ? nullptr : reinterpret_cast<void*>(v);
}

// A handoff step: wait until replay thread `giver` has made `steps` steps.
[[gnu::noinline, gnu::cold]] inline void handoff(const ThreadResult* peers, uint64_t giver, uint64_t steps,
                                                 ThreadResult& r) {
  ++r.handoffs;
  if (peers[giver].progress.load(std::memory_order_acquire) >= steps) return;
  const uint64_t t0 = monotonic_ns();
  for (unsigned spins = 0; peers[giver].progress.load(std::memory_order_acquire) < steps; ++spins) backoff(spins);
  ++r.handoff_waits;
  r.handoff_wait_ns += monotonic_ns() - t0;
}

inline void touch(void* p, uint64_t bytes, Touch mode) {
  if (bytes == 0 || mode == Touch::none) return;
  auto* c = static_cast<volatile char*>(p);
  switch (mode) {
    case Touch::none:
      break;
    case Touch::first:
      c[0] = 1;
      break;
    case Touch::pages:
    case Touch::recorded:  // (blocks without a recorded count)
      for (uint64_t off = 0; off < bytes; off += 4096) c[off] = 1;
      c[bytes - 1] = 1;
      break;
    case Touch::all:
      std::memset(p, 0x5a, bytes);
      break;
  }
}

inline void pace(uint64_t start_ns, uint64_t recorded_ns, double speed) {
  const double offset = double(recorded_ns) / speed;
  const uint64_t due = start_ns + (offset < 4e18 ? uint64_t(offset) : uint64_t{4000000000000000000});
  uint64_t now = monotonic_ns();
  if (now >= due) return;
  if (due - now > 200000) {  // sleep most of a long gap, spin the rest
    const uint64_t ns = due - now - 100000;
    timespec ts{time_t(ns / 1000000000u), long(ns % 1000000000u)};
    nanosleep(&ts, nullptr);
  }
  while (monotonic_ns() < due) __builtin_ia32_pause();
}

}  // namespace detail

namespace detail {

// The end of a producing call. The common case (the trace had a result and
// so does the replay) is one predictable test; the rest is out of line.
[[gnu::noinline, gnu::cold]] inline void made_unusual(Slot* table, uint64_t id, void* p, unsigned op, ThreadResult& r) {
  if (id == 0) {
    if (p) ++r.unexpected[op];  // kept: the trace never frees it
    return;
  }
  if (p) ++r.unrepresentable;  // (an address the table cannot hold: never on x86-64 Linux)
  ++r.nulls[op];
  table[ref_slot(id)].store(slot_value(kNullObject, id), std::memory_order_release);
}

// `touch_cap`: with --touch recorded, the bytes the program had resident (a
// byte a page up to there), written before the object is published, so that
// a consumer on another thread never frees it under the writes.
inline void made(Slot* table, uint64_t id, void* p, uint64_t bytes, unsigned op, Touch mode, ThreadResult& r,
                 uint64_t touch_cap) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  if (__builtin_expect(id != 0 && v != 0 && (v & ~kPointerMask) == 0, 1)) {
    touch(p, bytes < touch_cap ? bytes : touch_cap, mode);
    table[ref_slot(id)].store(slot_value(v, id), std::memory_order_release);
  } else {
    made_unusual(table, id, p, op, r);
  }
}

// Timestamps around a timed call: fenced, so that the call neither starts
// before the first nor finishes after the second.
inline uint64_t tick_begin(bool tsc) {
  if (!tsc) return monotonic_ns();
  _mm_lfence();
  return __rdtsc();
}
inline uint64_t tick_end(bool tsc) {
  if (!tsc) return monotonic_ns();
  unsigned aux;
  const uint64_t t = __rdtscp(&aux);
  _mm_lfence();
  return t;
}

// The program's own memory (plan.h, kStepMap ...): real system calls,
// outside the allocator under test. `st` is the step unpacked (plan.h);
// `length` carries a remap's old length from its kStepArg step.
[[gnu::noinline]] inline void memory_step(const Step& st, Slot* table, Touch mode, uint64_t& length, ThreadResult& r) {
  const unsigned op = st.head & 0xff;
  ++r.memory[op - kStepMap];
  char* region = nullptr;
  auto base = [&]() { return region = static_cast<char*>(obtain(table, st.old, r)); };
  // The region's next id, once this call is done (unmap, madvise, touch).
  struct Publish {
    Slot* table;
    uint64_t id;
    char*& region;
    unsigned op;
    ~Publish() {
      if (id != 0 && op != kStepMap && op != kStepRemap)
        table[ref_slot(id)].store(slot_value(region ? reinterpret_cast<uintptr_t>(region) : kNullObject, id),
                                  std::memory_order_release);
    }
  } publish{table, st.id(), region, op};
  switch (op) {
    case kStepMap: {
      void* p = mmap(nullptr, st.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) ++r.memory_failed;
      table[ref_slot(st.id())].store(
          slot_value(p == MAP_FAILED ? kNullObject : reinterpret_cast<uintptr_t>(p), st.id()),
          std::memory_order_release);
      break;
    }
    case kStepUnmap:
      if (char* b = base()) {
        if (munmap(b + st.arg, st.size) != 0) ++r.memory_failed;
      }
      break;
    case kStepArg:
      length = st.size;
      break;
    case kStepRemap: {
      char* b = base();
      void* p = b ? mremap(b + st.arg, length, st.size, MREMAP_MAYMOVE) : MAP_FAILED;
      if (p == MAP_FAILED) ++r.memory_failed;
      table[ref_slot(st.id())].store(
          slot_value(p == MAP_FAILED ? kNullObject : reinterpret_cast<uintptr_t>(p), st.id()),
          std::memory_order_release);
      break;
    }
    case kStepDontneed:
    case kStepLazyFree:
      if (char* b = base()) {
        if (madvise(b + st.arg, st.size, op == kStepDontneed ? MADV_DONTNEED : MADV_FREE) != 0) ++r.memory_failed;
      }
      break;
    case kStepTouch:  // the pages the program had resident (not with --touch none)
      if (char* b = base(); b && mode != Touch::none) {
        auto* c = reinterpret_cast<volatile char*>(b + st.arg);
        for (uint64_t off = 0; off < st.size; off += 4096) c[off] = 1;
      }
      break;
    case kStepTouchObject:  // written by its producing step, before it was published (made())
      break;
    default:
      break;
  }
}

}  // namespace detail

// Runs steps [s, end) with backend B; stops after a kStepNewThread
// (r.new_thread).
template <allocators::BackendCalls B, bool kPaced = false, bool kTimed = false>
void run_steps(const PlanStep* s, const PlanStep* end, const RunParams& prm, ThreadResult& r) {
  using trace::Op;
  Slot* const table = prm.table;
  const Touch run_mode = prm.touch;
  // (A remap's old length, from its kStepArg step: kept in the thread's
  // result, since a window of the plan can end between the two.)
  uint64_t& remap_length = r.remap_length;
  // (Likewise the kStepExt before a step: what it has no room for.)
  uint64_t ext_old = r.ext_old, ext_arg = r.ext_arg;
  [[maybe_unused]] uint32_t countdown = 1;
  [[maybe_unused]] const bool tsc = prm.tsc;
  const PlanStep* const first = s;
  const PlanStep* const origin = prm.origin ? prm.origin : s;
  // Latency: every sample_every-th call of the thread, calls 0, N, 2N...
  // (counted on from the call before, when its steps run in several calls).
  if constexpr (kTimed) countdown = r.sample_countdown ? r.sample_countdown : 1;
  const PlanStep* const last = s == end ? end : end - 1;
  for (; s != end; ++s) {
    if constexpr (kPaced) detail::pace(prm.start_ns, prm.times[s - origin], prm.speed);
      // The steps are known in advance: fetch the table slot a later step will
      // consume now, so that its cache miss overlaps this step's work.
#ifndef HEAPLAB_NO_PREFETCH
    // (A step's ref: what it consumes, produces or, in a kStepExt, what the
    // step after it consumes.)
    __builtin_prefetch(&table[ref_slot((s + 16 < last ? s + 16 : last)->head >> 16)], 0, 3);
#endif
    const uint64_t head = s->head;
    const unsigned op = head & 0xff;
    const unsigned flags = (head >> 8) & 0xff;
    // The object produced; for the calls that only consume, the object consumed.
    const uint64_t id = head >> 16;
    const size_t n = s->val, a = ext_arg;
    if (__builtin_expect(op >= kStepFirstMemory, 0)) {
      if (op == kStepExt) {
        ext_old = id;
        ext_arg = n;
      } else if (op == kStepNewThread) {
        // The steps after it run on a new thread (the caller starts it).
        r.progress.store(uint64_t(s - origin) + 1, std::memory_order_release);
        r.new_thread = true;
        end = s + 1;
        break;
      } else {
        const PlanStep ext{uint64_t{kStepExt} | ext_old << 16, ext_arg};
        if (op == kStepHandoff)
          detail::handoff(prm.peers, id, n, r);
        else
          detail::memory_step(unpack_step(*s, &ext), table, run_mode, remap_length, r);
        ext_old = ext_arg = 0;
      }
      r.progress.store(uint64_t(s - origin) + 1, std::memory_order_release);
      continue;
    }
    // With --touch recorded, an object whose resident pages the trace
    // recorded gets that many (its touch_object step, next, says how many).
    const Touch mode = run_mode;
    // (The plan always has that step right after: check_steps() made sure.)
    const uint64_t touch_cap = (flags & kStepTouchFollows) && run_mode == Touch::recorded ? s[1].val : ~uint64_t{0};
    [[maybe_unused]] bool sample = false;
    [[maybe_unused]] uint64_t t0 = 0, t1 = 0;
    if constexpr (kTimed) {
      if (prm.program_calls) {
        sample = flags & kStepProgramTimed;
      } else {
        sample = --countdown == 0;
        if (sample) countdown = prm.sample_every;
      }
    }
    // Producing calls end in made(); consuming ones get their object from
    // obtain(), which waits if another thread has yet to produce it.
#define HEAPLAB_TIMED(...)                      \
  do {                                          \
    if constexpr (kTimed) {                     \
      if (sample) t0 = detail::tick_begin(tsc); \
    }                                           \
    __VA_ARGS__;                                \
    if constexpr (kTimed) {                     \
      if (sample) t1 = detail::tick_end(tsc);   \
    }                                           \
  } while (0)
#define HEAPLAB_MADE(expr)                                     \
  do {                                                         \
    void* made_;                                               \
    HEAPLAB_TIMED(made_ = (expr));                             \
    detail::made(table, id, made_, n, op, mode, r, touch_cap); \
  } while (0)
#define HEAPLAB_OLD detail::obtain(table, id, r)
    switch (static_cast<Op>(op)) {
      case Op::malloc:
        HEAPLAB_MADE(B::malloc(n));
        break;
      case Op::calloc: {
        void* p;
        HEAPLAB_TIMED(p = B::calloc(a, n));
        detail::made(table, id, p, n * a, op, mode, r, touch_cap);
        break;
      }
      case Op::realloc:
      case Op::reallocarray: {
        void* q = detail::obtain(table, ext_old, r);
        void* p;
        HEAPLAB_TIMED(p = static_cast<Op>(op) == Op::realloc ? B::realloc(q, n) : B::reallocarray(q, a, n));
        if (__builtin_expect(flags & trace::kFailed, 0)) {
          // Failed in the trace, so the program kept using the old object,
          // which the plan names `id` from here on: where it now is (moved
          // if the call succeeded here, else where it was).
          if (id != 0) {
            const void* now = p ? p : q;
            table[ref_slot(id)].store(slot_value(now ? reinterpret_cast<uintptr_t>(now) : kNullObject, id),
                                      std::memory_order_release);
            if (p) ++r.moved_failed_reallocs;
          } else if (p) {
            ++r.unexpected[op];  // realloc(NULL, n) failed in the trace only
          }
          break;
        }
        detail::made(table, id, p, static_cast<Op>(op) == Op::realloc ? n : n * a, op, mode, r, touch_cap);
        break;
      }
      case Op::free: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::free(q_));
        break;
      }
      case Op::memalign:
        HEAPLAB_MADE(B::memalign(a, n));
        break;
      case Op::posix_memalign: {
        void* p = nullptr;
        int rc;
        HEAPLAB_TIMED(rc = B::posix_memalign(&p, a, n));
        if (rc != 0) p = nullptr;
        detail::made(table, id, p, n, op, mode, r, touch_cap);
        break;
      }
      case Op::aligned_alloc:
        HEAPLAB_MADE(B::aligned_alloc(a, n));
        break;
      case Op::valloc:
        HEAPLAB_MADE(B::valloc(n));
        break;
      case Op::pvalloc:
        HEAPLAB_MADE(B::pvalloc(n));
        break;
      // A throwing new that failed in the trace is replayed in its nothrow
      // form: some allocators abort instead of throwing (mimalloc built as
      // C), and the replay must go on to record the failure.
      case Op::op_new: {
        void* p = nullptr;
        HEAPLAB_TIMED(
            if (flags & trace::kFailed) { p = B::op_new_nothrow(n); } else {
              try {
                p = B::op_new(n);
              } catch (const std::bad_alloc&) {
                p = nullptr;
              }
            });
        detail::made(table, id, p, n, op, mode, r, touch_cap);
        break;
      }
      case Op::op_new_array: {
        void* p = nullptr;
        HEAPLAB_TIMED(
            if (flags & trace::kFailed) { p = B::op_new_array_nothrow(n); } else {
              try {
                p = B::op_new_array(n);
              } catch (const std::bad_alloc&) {
                p = nullptr;
              }
            });
        detail::made(table, id, p, n, op, mode, r, touch_cap);
        break;
      }
      case Op::op_new_nothrow:
        HEAPLAB_MADE(B::op_new_nothrow(n));
        break;
      case Op::op_new_array_nothrow:
        HEAPLAB_MADE(B::op_new_array_nothrow(n));
        break;
      case Op::op_new_aligned: {
        void* p = nullptr;
        HEAPLAB_TIMED(
            if (flags & trace::kFailed) { p = B::op_new_aligned_nothrow(n, a); } else {
              try {
                p = B::op_new_aligned(n, a);
              } catch (const std::bad_alloc&) {
                p = nullptr;
              }
            });
        detail::made(table, id, p, n, op, mode, r, touch_cap);
        break;
      }
      case Op::op_new_array_aligned: {
        void* p = nullptr;
        HEAPLAB_TIMED(
            if (flags & trace::kFailed) { p = B::op_new_array_aligned_nothrow(n, a); } else {
              try {
                p = B::op_new_array_aligned(n, a);
              } catch (const std::bad_alloc&) {
                p = nullptr;
              }
            });
        detail::made(table, id, p, n, op, mode, r, touch_cap);
        break;
      }
      case Op::op_new_aligned_nothrow:
        HEAPLAB_MADE(B::op_new_aligned_nothrow(n, a));
        break;
      case Op::op_new_array_aligned_nothrow:
        HEAPLAB_MADE(B::op_new_array_aligned_nothrow(n, a));
        break;
      case Op::op_delete: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete(q_));
        break;
      }
      case Op::op_delete_array: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_array(q_));
        break;
      }
      case Op::op_delete_sized: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_sized(q_, n));
        break;
      }
      case Op::op_delete_array_sized: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_array_sized(q_, n));
        break;
      }
      case Op::op_delete_aligned: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_aligned(q_, a));
        break;
      }
      case Op::op_delete_array_aligned: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_array_aligned(q_, a));
        break;
      }
      case Op::op_delete_sized_aligned: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_sized_aligned(q_, n, a));
        break;
      }
      case Op::op_delete_array_sized_aligned: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_array_sized_aligned(q_, n, a));
        break;
      }
      case Op::op_delete_nothrow: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_nothrow(q_));
        break;
      }
      case Op::op_delete_array_nothrow: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_array_nothrow(q_));
        break;
      }
      case Op::op_delete_aligned_nothrow: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_aligned_nothrow(q_, a));
        break;
      }
      case Op::op_delete_array_aligned_nothrow: {
        void* q_ = HEAPLAB_OLD;
        HEAPLAB_TIMED(B::op_delete_array_aligned_nothrow(q_, a));
        break;
      }
      default:
        break;  // not a call (the plan has none of these)
    }
#undef HEAPLAB_MADE
#undef HEAPLAB_OLD
#undef HEAPLAB_TIMED
    if constexpr (kTimed) {
      if (sample) {
        const uint64_t d = t1 - t0;
        prm.latency[op].add(d > prm.timer_overhead ? d - prm.timer_overhead : 0);
      }
    }
    ext_old = ext_arg = 0;
    // (Release: a handoff step on another thread that sees this progress
    // may reuse the slots this thread's consumes read.)
    r.progress.store(uint64_t(s - origin) + 1, std::memory_order_release);
  }
  r.ext_old = ext_old;
  r.ext_arg = ext_arg;
  if constexpr (kTimed) r.sample_countdown = countdown;
  r.end_ns = monotonic_ns();
  // The calls made, per op: every step executed makes exactly its call, so
  // they are counted here, off the hot loop.
  for (const PlanStep* t = first; t != end; ++t) {
    const unsigned op = t->head & 0xff;
    if (op < trace::kOpCount) ++r.calls[op];  // (memory steps count themselves)
  }
}

}  // namespace heaplab::replay
