// The seam between interposition (hooks.h) and where events go. Every hook
// ends in emit(), which goes to one of two sinks: the file sink (the software
// route: per-thread blocks of a shared file mapping, sink_file.cpp) or the
// ptwrite sink (Intel PT: five `ptwrite` payloads per event, recorded by
// perf; sink_ptwrite.cpp, layout in capture/shim/ptw_format.h). emit() and the
// clock are all the hooks know of.
//
// libc only: no C++ runtime, no allocation, async-signal-safe on the hot path.
#pragma once

#include <stdint.h>

#include "capture/shim/ptw_format.h"
#include "capture/shim/raw_format.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <sys/types.h>
#include <time.h>

namespace heaplab::shim {

// Per-thread state of the file sink. `cur` is the next free record slot in
// the thread's current block. Blocks are kBlockSize-aligned in memory, so a
// slot whose offset in its block is below kBlockHeaderSize means "no room":
// the slow path claims a block. The reservation is a single instruction, so
// a signal handler that allocates between reservation and write gets its own
// slot and never tears the interrupted record.
struct ThreadSink {
  uint64_t cur;   // 0 = no block yet
  uint32_t slot;  // the thread's number + 1 (raw::BlockHeader::thread), 0 = not assigned
  uint32_t tid;
  uint64_t block_seq;  // blocks this thread has started
  char* block;         // the thread's block in the mapping
  char name[16];       // the thread's name when last read
};

extern __thread ThreadSink t_sink __attribute__((tls_model("initial-exec")));

extern uint32_t g_clock;  // raw::Clock

// Slow path: claims a block (or drops the event if capture is off in this
// process) and writes the record, stamped once it has a place.
void emit_slow(uint32_t op, uint64_t a, uint64_t b, uint64_t c);

inline uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// Timestamps. Allocations are stamped after the real call returns, releases
// before it starts. The TSC is read without fences: fencing (lfence, rdtscp)
// waits for the program's outstanding cache misses and tripled the cost per
// event on a std::map workload. The rare cross-thread inversion this allows
// (an allocation stamped a few cycles before the free that made its address
// available) is repaired by the normaliser, which looks for the resolving
// record at the head of the other threads' streams.
inline uint64_t stamp() {
#if defined(__x86_64__)
  if (__builtin_expect(g_clock == raw::kClockTsc, 1)) return __rdtsc();
#endif
  return mono_ns();
}

// Where the thread's restartable-sequence area (rseq(2), registered for
// every thread by glibc 2.35 and later) keeps its rseq_cs pointer, from the
// thread pointer; 0 where there is none, or the clock is not the TSC (set
// by sink_open).
extern intptr_t g_rseq_cs_offset;

// A signal handler wrote records after `r`'s slot before `r` was published
// (it interrupted the write): `r` takes the stamp of the first of them, not
// a later one. Stamped after the handler, it would put its thread's records
// out of stamp order, and the reader would lift the handler's up to it (a
// handler's free placed after another thread's reuse of the address). The
// handler ran after this call returned (an allocation's record) or before
// it starts (a release's): its stamp is one the record may take. (The first
// record after `r` is the next slot; `r` being its block's last, the handler
// moved the thread to another block and noted the clock then in `r`'s
// block (raw::kPendingTicksOffset), before it stamped anything there; with
// no note, the capture having stopped, `r` keeps its own stamp. A fork
// child, its parent's mapping gone, writes nothing.) `ticks`: a stamp
// already taken for `r`, kept if earlier.
[[gnu::noinline, gnu::cold]] inline void publish_after_handler(raw::Record* r, uint32_t op,
                                                               uint64_t ticks = UINT64_MAX) {
  if (t_sink.block == nullptr) return;  // (sink_after_fork: the mapping is not ours)
  const auto next = reinterpret_cast<uint64_t>(r + 1);
  uint64_t first = 0;  // the handler's first stamp (56 bits), 0 if not known
  if ((next & (raw::kBlockSize - 1)) != 0) {
    first = raw::record_ticks(__atomic_load_n(&r[1].head, __ATOMIC_RELAXED));
  } else {
    const auto* note = reinterpret_cast<const uint64_t*>(next - raw::kBlockSize + raw::kPendingTicksOffset);
    first = __atomic_load_n(note, __ATOMIC_RELAXED) & raw::kTicksMask;
  }
  if (ticks == UINT64_MAX) ticks = first != 0 ? first : stamp();
  if (first != 0 && first < (ticks & raw::kTicksMask)) ticks = first;
  __atomic_store_n(&r->head, raw::record_head(op, ticks), __ATOMIC_RELEASE);
}

// Stamps record `r`, the thread's latest reservation, and publishes it (its
// head, the last word written). With the TSC and rseq, the clock read and
// the store are one restartable sequence: a thread preempted, migrated or
// signalled between the two starts again from the clock read, so a record is
// not published long after its stamp. A live reader takes a thread it polls
// for caught up to its poll's clock (less 20 ms): a record stamped before a
// long preemption and published after the poll would come after other
// threads' records stamped later. (Without rseq, that window is a few
// instructions; a hypervisor that stops the virtual CPU there is not seen
// even with it.) A signal handler that wrote records after `r` meanwhile
// (the thread's cursor moved on): publish_after_handler, with rseq or
// without.
inline void publish(raw::Record* r, uint32_t op) {
#if defined(__x86_64__)
  if (__builtin_expect(g_rseq_cs_offset != 0, 1)) {
    // 3: the critical section's descriptor (struct rseq_cs: version, flags,
    // start, length, abort); 1-2: the section, its last instruction the
    // commit (the cursor's check in it: a handler that ran once it was made
    // aborted it); 4: the abort handler, after glibc's signature (RSEQ_SIG),
    // set apart; it starts again from 6, setting the descriptor (the kernel
    // clears it on abort).
    asm goto(
        ".pushsection __rseq_cs, \"aw?\"\n\t"
        ".balign 32\n\t"
        "3:\n\t"
        ".long 0, 0\n\t"
        ".quad 1f, 2f - 1f, 4f\n\t"
        ".popsection\n\t"
        "6:\n\t"
        "leaq 3b(%%rip), %%rax\n\t"
        "movq %%rax, %%fs:(%[off])\n\t"
        "1:\n\t"
        "cmpq %[expect], (%[cur])\n\t"
        "jne %l[moved]\n\t"
        "rdtsc\n\t"
        "shlq $32, %%rdx\n\t"
        "orq %%rdx, %%rax\n\t"
        "shlq $8, %%rax\n\t"
        "orq %[op1], %%rax\n\t"
        "movq %%rax, (%[head])\n\t"
        "2:\n\t"
        ".pushsection __rseq_failure, \"ax?\"\n\t"
        ".byte 0x0f, 0xb9, 0x3d\n\t"
        ".long 0x53053053\n\t"
        "4:\n\t"
        "jmp 6b\n\t"
        ".popsection\n\t"
        :
        : [off] "r"(g_rseq_cs_offset), [cur] "r"(&t_sink.cur), [expect] "r"(reinterpret_cast<uint64_t>(r + 1)),
          [head] "r"(&r->head), [op1] "r"(uint64_t(op) + 1u)
        : "rax", "rdx", "memory", "cc"
        : moved);
    return;
  moved:
    publish_after_handler(r, op);
    return;
  }
#endif
  // (The stamp before the cursor's check: a handler that runs after the
  // check stamps after this record.)
  const uint64_t ticks = stamp();
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  if (__builtin_expect(__atomic_load_n(&t_sink.cur, __ATOMIC_RELAXED) != reinterpret_cast<uint64_t>(r + 1), 0)) {
    publish_after_handler(r, op, ticks);
    return;
  }
  __atomic_store_n(&r->head, raw::record_head(op, ticks), __ATOMIC_RELEASE);
}

// In-program latency: one call in g_latency_every is timed inside the
// allocator (0: none). t_latency_left counts down to the next.
extern uint32_t g_latency_every;
extern __thread uint32_t t_latency_left __attribute__((tls_model("initial-exec")));
inline bool latency_sample() {
  if (__builtin_expect(g_latency_every == 0, 1)) return false;
  if (t_latency_left == 0) t_latency_left = g_latency_every;
  return --t_latency_left == 0;
}
// Fenced clock reads around a timed call, as the replay's.
inline uint64_t timer_begin() {
#if defined(__x86_64__)
  if (__builtin_expect(g_clock == raw::kClockTsc, 1)) {
    _mm_lfence();
    return __rdtsc();
  }
#endif
  return mono_ns();
}
inline uint64_t timer_end() {
#if defined(__x86_64__)
  if (__builtin_expect(g_clock == raw::kClockTsc, 1)) {
    unsigned aux;
    const uint64_t t = __rdtscp(&aux);
    _mm_lfence();
    return t;
  }
#endif
  return mono_ns();
}

// Clock ticks this thread spent on capture work the shim timed (emit_slow's
// block appends, mincore): recorded as kRawOverhead so that the normaliser
// can take it off the thread's timeline. (The table of large blocks is not
// timed: a lock and two sigprocmask calls per large block.)
extern __thread uint64_t t_overhead __attribute__((tls_model("initial-exec")));
void emit(uint32_t op, uint64_t a, uint64_t b, uint64_t c);
// Adds the ticks since `t0` (a stamp()) to t_overhead and records the total.
inline void note_overhead(uint64_t t0);
// The fast path's cost per event, measured once at start-up (ticks x 1024).
void sink_set_event_cost(uint64_t ticks_x1024, uint64_t timer_overhead);

// False in processes (and fork children) that are not captured: emit() then
// does nothing.
extern bool g_capturing;
// heaplab capture normalises while the program runs (HEAPLAB_CAPTURE_LIVE):
// a live reader is coming, so threads that end before it has started get
// their exit node all the same (thread_ending), and it finds them gone at
// its first look, not only at the end.
extern bool g_live_reader_coming;

// Events go out as ptwrite payloads (set once at start-up, only where the
// CPU has ptwrite: elsewhere the instruction raises SIGILL).
extern bool g_ptwrite;
// The thread's next event number on the ptwrite route (from 0; a fork child
// starts over).
extern __thread uint32_t t_pt_seq __attribute__((tls_model("initial-exec")));

// One event as five ptwrites: header, TSC, a, b, c. With PT off (perf not
// tracing this thread) ptwrite does nothing. A signal handler that allocates
// between two of them cuts the interrupted event (the decoder counts it
// lost) but its own event decodes.
inline void emit_ptwrite(uint32_t op, uint64_t a, uint64_t b, uint64_t c) {
#if defined(__x86_64__)
  const uint64_t tsc = __rdtsc();
  const uint32_t seq = t_pt_seq++;
  const uint64_t h = pt::header_word(op, seq, tsc, a, b, c);
  asm volatile("ptwrite %0" : : "r"(h));
  asm volatile("ptwrite %0" : : "r"(tsc));
  asm volatile("ptwrite %0" : : "r"(a));
  asm volatile("ptwrite %0" : : "r"(b));
  asm volatile("ptwrite %0" : : "r"(c));
#else
  (void)op, (void)a, (void)b, (void)c;
#endif
}

// Records one event, stamped now: hooks call it after an allocating call
// returns and before a releasing call starts.
extern bool g_stopped;  // capture stopped on an error: calls are counted, not recorded
void count_dropped(uint32_t op);

inline void emit(uint32_t op, uint64_t a, uint64_t b, uint64_t c) {
  if (__builtin_expect(!g_capturing, 0)) {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);  // (stop_capture: g_stopped before g_capturing)
    if (__builtin_expect(__atomic_load_n(&g_stopped, __ATOMIC_RELAXED), 0)) count_dropped(op);
    return;
  }
  if (__builtin_expect(g_ptwrite, 0)) {
    emit_ptwrite(op, a, b, c);
    return;
  }
  uint64_t slot = raw::kRecordSize;
#if defined(__x86_64__)
  // Not `lock`ed: only this thread (and its signal handlers) touch t_sink.
  asm volatile("xaddq %0, %1" : "+r"(slot), "+m"(t_sink.cur) : : "memory");
#else
  slot = __atomic_fetch_add(&t_sink.cur, slot, __ATOMIC_RELAXED);
#endif
  if (__builtin_expect((slot & (raw::kBlockSize - 1)) < raw::kBlockHeaderSize, 0)) {
    emit_slow(op, a, b, c);
    return;
  }
  auto* r = reinterpret_cast<raw::Record*>(slot);
  r->a = a;
  r->b = b;
  r->c = c;
  publish(r, op);  // stamped last
}

inline void note_overhead(uint64_t t0) {
  t_overhead += stamp() - t0;
  emit(raw::kRawOverhead, t_overhead, 0, 0);
}

// Process lifecycle of the sink (shim.cpp calls these).
// The `heaplab capture` process (HEAPLAB_CAPTURE_LAUNCHER; 0: none, the
// shim used on its own): when it has gone, recording stops.
extern pid_t g_launcher;

struct SinkConfig {
  const char* dir;  // where raw files go
  bool tsc;         // use the TSC (else CLOCK_MONOTONIC)
  bool fork_child;  // this image is a fork child
};
// Opens DIR/PID.GEN.hlraw. Where that fails (a message on stderr), the
// header goes into a spare slot (sink_set_spare) and calls are counted
// there; false (capture off) without one.
bool sink_open(const SinkConfig& cfg);
// heaplab capture's spare header memfd (raw_format.h, SpareControl), or -1.
void sink_set_spare(int fd);
// An image not followed whose note_unfollowed line could not be written:
// counted in the spare memfd's control block instead. Async-signal-safe.
void sink_count_unnoted(bool exec);
// In a fork child: drop the parent's file; open a new one if `follow`.
void sink_after_fork(bool follow, const char* dir);
// At exit: clock pair and clean-exit flag.
void sink_close();
// Whether a raw file exists for this pid with generation 0 (exec detection).
bool sink_first_image(const char* dir);

// The ptwrite sink (sink_ptwrite.cpp).
// Whether this CPU can execute ptwrite: CPUID.(EAX=07H,ECX=0):EBX[25]
// (Intel PT) and CPUID.(EAX=14H,ECX=0):EBX[4] (PTWRITE).
bool cpu_has_ptwrite();
// Starts the ptwrite route in this image (or fork child): marks
// DIR/PID.GEN.ptw (so that exec detection works as with raw files), numbers
// this thread's events from 0 and turns emit() to ptwrite.
bool ptwrite_open(const char* dir);

}  // namespace heaplab::shim
