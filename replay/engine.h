// The replay loop: one replay thread runs its steps against backend B.
//
// Objects live in a table indexed by object id (dense, so a flat array of
// pointers; mmap'd by the caller, never from the allocator under test).
// A slot is 0 until its object was produced; the thread that consumes it
// loads the slot with acquire order and, if it is still 0 (the producer is
// another thread that has not got there yet), waits for it: spinning
// briefly, then yielding. That is the only synchronisation between replay
// threads, and the plan guarantees that it ends (replay/plan.h).
#pragma once

#include <sched.h>
#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

#include "capture/format/event.h"
#include "replay/plan.h"

namespace heaplab::replay {

using Slot = std::atomic<uintptr_t>;
// A produced object whose call returned NULL in the replay (but not in the
// trace): consumers then pass NULL.
inline constexpr uintptr_t kNullObject = 1;

enum class Touch : uint8_t {
  none,   // do not write allocated memory
  first,  // write its first byte
  pages,  // write one byte in every page it spans (default: RSS as if used)
  all,    // write every byte
};

struct ThreadResult {
  std::array<uint64_t, trace::kOpCount> calls{};
  std::array<uint64_t, trace::kOpCount> nulls{};       // NULL where the trace had a result
  std::array<uint64_t, trace::kOpCount> unexpected{};  // a result where the trace had NULL
  uint64_t moved_failed_reallocs = 0;  // realloc failed in the trace, succeeded here
  uint64_t waits = 0;                  // consumes that waited for another thread
  uint64_t wait_ns = 0;
  uint64_t start_ns = 0, end_ns = 0;
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
  Slot* table = nullptr;
  Touch touch = Touch::pages;
  // Paced replay: step i does not start before start_ns + times[i] / speed.
  const uint64_t* times = nullptr;
  double speed = 1.0;
  uint64_t start_ns = 0;
};

namespace detail {

[[gnu::noinline, gnu::cold]] inline uintptr_t wait_for(Slot* table, uint64_t id, ThreadResult& r) {
  const uint64_t t0 = monotonic_ns();
  uintptr_t v;
  for (unsigned spins = 0; (v = table[id].load(std::memory_order_acquire)) == 0; ++spins) {
    if (spins < 256)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
  ++r.waits;
  r.wait_ns += monotonic_ns() - t0;
  return v;
}

inline void* obtain(Slot* table, uint64_t id, ThreadResult& r) {
  if (id == 0) return nullptr;
  uintptr_t v = table[id].load(std::memory_order_acquire);
  if (__builtin_expect(v == 0, 0)) v = wait_for(table, id, r);
  return v == kNullObject ? nullptr : reinterpret_cast<void*>(v);
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
      for (uint64_t off = 0; off < bytes; off += 4096) c[off] = 1;
      c[bytes - 1] = 1;
      break;
    case Touch::all:
      std::memset(p, 0x5a, bytes);
      break;
  }
}

inline void pace(uint64_t start_ns, uint64_t recorded_ns, double speed) {
  const uint64_t due = start_ns + uint64_t(double(recorded_ns) / speed);
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

// Runs steps [s, end) with backend B.
template <class B, bool kPaced = false>
void run_steps(const Step* s, const Step* end, const RunParams& prm, ThreadResult& r) {
  using trace::Op;
  Slot* const table = prm.table;
  const Step* const first = s;
  for (; s != end; ++s) {
    if constexpr (kPaced) detail::pace(prm.start_ns, prm.times[s - first], prm.speed);
    const uint64_t head = s->head;
    const unsigned op = head & 0xff;
    const unsigned flags = (head >> 8) & 0xff;
    const uint64_t id = head >> 16;
    const size_t n = s->size, a = s->arg;
    void* p = nullptr;
    uint64_t bytes = n;
    switch (static_cast<Op>(op)) {
      case Op::malloc: p = B::malloc(n); break;
      case Op::calloc: p = B::calloc(a, n); bytes = n * a; break;
      case Op::realloc:
      case Op::reallocarray: {
        void* q = detail::obtain(table, s->old, r);
        if (static_cast<Op>(op) == Op::realloc) {
          p = B::realloc(q, n);
        } else {
          p = B::reallocarray(q, a, n);
          bytes = n * a;
        }
        if ((flags & trace::kFailed) && p) {
          // Failed in the trace, so the program kept using the old object;
          // here it moved, so that is where the object now is.
          if (s->old) {
            table[s->old].store(reinterpret_cast<uintptr_t>(p), std::memory_order_release);
            ++r.moved_failed_reallocs;
          } else {
            ++r.unexpected[op];
          }
          p = nullptr;
        }
        break;
      }
      case Op::free: B::free(detail::obtain(table, s->old, r)); break;
      case Op::memalign: p = B::memalign(a, n); break;
      case Op::posix_memalign:
        if (B::posix_memalign(&p, a, n) != 0) p = nullptr;
        break;
      case Op::aligned_alloc: p = B::aligned_alloc(a, n); break;
      case Op::valloc: p = B::valloc(n); break;
      case Op::pvalloc: p = B::pvalloc(n); break;
      // A throwing new that failed in the trace is replayed in its nothrow
      // form: some allocators abort instead of throwing (mimalloc built as
      // C), and the replay must go on to record the failure.
      case Op::op_new:
        if (flags & trace::kFailed) { p = B::op_new_nothrow(n); break; }
        try { p = B::op_new(n); } catch (const std::bad_alloc&) { p = nullptr; }
        break;
      case Op::op_new_array:
        if (flags & trace::kFailed) { p = B::op_new_array_nothrow(n); break; }
        try { p = B::op_new_array(n); } catch (const std::bad_alloc&) { p = nullptr; }
        break;
      case Op::op_new_nothrow: p = B::op_new_nothrow(n); break;
      case Op::op_new_array_nothrow: p = B::op_new_array_nothrow(n); break;
      case Op::op_new_aligned:
        if (flags & trace::kFailed) { p = B::op_new_aligned_nothrow(n, a); break; }
        try { p = B::op_new_aligned(n, a); } catch (const std::bad_alloc&) { p = nullptr; }
        break;
      case Op::op_new_array_aligned:
        if (flags & trace::kFailed) { p = B::op_new_array_aligned_nothrow(n, a); break; }
        try { p = B::op_new_array_aligned(n, a); } catch (const std::bad_alloc&) { p = nullptr; }
        break;
      case Op::op_new_aligned_nothrow: p = B::op_new_aligned_nothrow(n, a); break;
      case Op::op_new_array_aligned_nothrow: p = B::op_new_array_aligned_nothrow(n, a); break;
      case Op::op_delete: B::op_delete(detail::obtain(table, s->old, r)); break;
      case Op::op_delete_array: B::op_delete_array(detail::obtain(table, s->old, r)); break;
      case Op::op_delete_sized: B::op_delete_sized(detail::obtain(table, s->old, r), n); break;
      case Op::op_delete_array_sized:
        B::op_delete_array_sized(detail::obtain(table, s->old, r), n);
        break;
      case Op::op_delete_aligned: B::op_delete_aligned(detail::obtain(table, s->old, r), a); break;
      case Op::op_delete_array_aligned:
        B::op_delete_array_aligned(detail::obtain(table, s->old, r), a);
        break;
      case Op::op_delete_sized_aligned:
        B::op_delete_sized_aligned(detail::obtain(table, s->old, r), n, a);
        break;
      case Op::op_delete_array_sized_aligned:
        B::op_delete_array_sized_aligned(detail::obtain(table, s->old, r), n, a);
        break;
      case Op::op_delete_nothrow: B::op_delete_nothrow(detail::obtain(table, s->old, r)); break;
      case Op::op_delete_array_nothrow:
        B::op_delete_array_nothrow(detail::obtain(table, s->old, r));
        break;
      case Op::op_delete_aligned_nothrow:
        B::op_delete_aligned_nothrow(detail::obtain(table, s->old, r), a);
        break;
      case Op::op_delete_array_aligned_nothrow:
        B::op_delete_array_aligned_nothrow(detail::obtain(table, s->old, r), a);
        break;
      default:
        continue;  // not a call (the plan has none of these)
    }
    ++r.calls[op];
    if (id != 0) {
      uintptr_t v = reinterpret_cast<uintptr_t>(p);
      if (__builtin_expect(p == nullptr, 0)) {
        ++r.nulls[op];
        v = kNullObject;
      } else {
        detail::touch(p, bytes, prm.touch);
      }
      table[id].store(v, std::memory_order_release);
    } else if (p != nullptr) {
      ++r.unexpected[op];  // kept: the trace never frees it
    }
    r.progress.store(uint64_t(s - first) + 1, std::memory_order_relaxed);
  }
}

}  // namespace heaplab::replay
