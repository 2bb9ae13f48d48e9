// Start-up of the capture shim: finds the next definition of every
// allocation function (dlsym(RTLD_NEXT)), decides whether this process image
// is captured, opens the sink, and follows (or leaves alone) fork children.
// libc, libdl and pthread only: no C++ runtime, no allocation of its own.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "capture/shim/hooks.h"
#include "capture/shim/shim_util.h"

alignas(64) char heaplab_clone_stack[64 * 1024];

namespace heaplab::shim {

Real g_real;
int g_state = 0;
alignas(4096) char g_boot[256 * 1024];
const size_t g_boot_size = sizeof g_boot;

namespace {

size_t g_boot_used = 0;
pthread_t g_init_thread;
const char* g_dir = nullptr;
bool g_follow_fork = false;

// Boot allocations carry their size just below the returned pointer.
struct BootHeader {
  size_t size;
  size_t pad;
};

// The library a symbol lives in, or nullptr.
const void* object_of(const void* fn) {
  Dl_info info;
  if (!fn || !dladdr(fn, &info)) return nullptr;
  return info.dli_fbase;
}

bool in_library(const void* fn, const char* name_part) {
  Dl_info info;
  return fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, name_part);
}

void* next_symbol(const char* name) { return dlsym(RTLD_NEXT, name); }

[[noreturn]] void fatal(const char* what) {
  shim_error(what, 0);
  _exit(127);
}

// Replacements for the optional C functions an allocator may not define: a
// glibc definition would hand the allocator's pointers to glibc's heap.
size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
void* emu_memalign(size_t align, size_t n) {
  void* p = nullptr;
  if (g_real.posix_memalign(&p, align < sizeof(void*) ? sizeof(void*) : align, n) != 0) return nullptr;
  return p;
}
int emu_posix_memalign(void** out, size_t align, size_t n) {
  if (align == 0 || (align & (align - 1)) || align % sizeof(void*)) return EINVAL;
  void* p = g_real.memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* emu_aligned_alloc(size_t align, size_t n) { return g_real.memalign(align, n); }
void* emu_valloc(size_t n) { return g_real.memalign(page_size(), n); }
void* emu_pvalloc(size_t n) {
  size_t ps = page_size();
  size_t rounded = (n + ps - 1) & ~(ps - 1);
  return g_real.memalign(ps, rounded ? rounded : ps);
}
void* emu_reallocarray(void* old, size_t count, size_t n) {
  size_t total;
  if (__builtin_mul_overflow(count, n, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return g_real.realloc(old, total);
}

template <typename F>
void resolve_optional(F*& slot, const char* name, F* emulation, const void* alloc_object, bool alloc_is_libc) {
  auto* fn = reinterpret_cast<F*>(next_symbol(name));
  bool mixes_heaps = !alloc_is_libc && fn && object_of(reinterpret_cast<void*>(fn)) != alloc_object &&
                     in_library(reinterpret_cast<void*>(fn), "libc.so");
  slot = (fn && !mixes_heaps) ? fn : emulation;
}

const char* const kNewNames[8] = {"_Znwm",
                                  "_Znam",
                                  "_ZnwmRKSt9nothrow_t",
                                  "_ZnamRKSt9nothrow_t",
                                  "_ZnwmSt11align_val_t",
                                  "_ZnamSt11align_val_t",
                                  "_ZnwmSt11align_val_tRKSt9nothrow_t",
                                  "_ZnamSt11align_val_tRKSt9nothrow_t"};
const char* const kDeleteNames[12] = {"_ZdlPv",
                                      "_ZdaPv",
                                      "_ZdlPvm",
                                      "_ZdaPvm",
                                      "_ZdlPvSt11align_val_t",
                                      "_ZdaPvSt11align_val_t",
                                      "_ZdlPvmSt11align_val_t",
                                      "_ZdaPvmSt11align_val_t",
                                      "_ZdlPvRKSt9nothrow_t",
                                      "_ZdaPvRKSt9nothrow_t",
                                      "_ZdlPvSt11align_val_tRKSt9nothrow_t",
                                      "_ZdaPvSt11align_val_tRKSt9nothrow_t"};

// The next operator, unless it is libstdc++'s (which only calls malloc/free
// and is emulated, so that one `new` is one event).
void* next_operator(const char* name) {
  void* fn = next_symbol(name);
  if (!fn || in_library(fn, "libstdc++")) return nullptr;
  return fn;
}

void resolve() {
  g_real.malloc = reinterpret_cast<void* (*)(size_t)>(next_symbol("malloc"));
  g_real.free = reinterpret_cast<void (*)(void*)>(next_symbol("free"));
  g_real.calloc = reinterpret_cast<void* (*)(size_t, size_t)>(next_symbol("calloc"));
  g_real.realloc = reinterpret_cast<void* (*)(void*, size_t)>(next_symbol("realloc"));
  if (!g_real.malloc || !g_real.free || !g_real.calloc || !g_real.realloc)
    fatal("no malloc/free/calloc/realloc found after the shim in the library chain");
  memory_resolve(reinterpret_cast<void*>(g_real.malloc));
  const void* alloc_object = object_of(reinterpret_cast<void*>(g_real.malloc));
  bool alloc_is_libc = in_library(reinterpret_cast<void*>(g_real.malloc), "libc.so");
  // memalign first: the other emulations build on it; its own emulation on posix_memalign.
  g_real.posix_memalign = reinterpret_cast<int (*)(void**, size_t, size_t)>(next_symbol("posix_memalign"));
  resolve_optional(g_real.memalign, "memalign", emu_memalign, alloc_object, alloc_is_libc);
  resolve_optional(g_real.posix_memalign, "posix_memalign", emu_posix_memalign, alloc_object, alloc_is_libc);
  if (g_real.memalign == emu_memalign && g_real.posix_memalign == emu_posix_memalign)
    fatal("the allocator after the shim defines neither memalign nor posix_memalign");
  resolve_optional(g_real.aligned_alloc, "aligned_alloc", emu_aligned_alloc, alloc_object, alloc_is_libc);
  resolve_optional(g_real.valloc, "valloc", emu_valloc, alloc_object, alloc_is_libc);
  resolve_optional(g_real.pvalloc, "pvalloc", emu_pvalloc, alloc_object, alloc_is_libc);
  // Always ours: glibc's reallocarray calls realloc through the PLT, which
  // would record the call twice; this is the same overflow check + realloc.
  g_real.reallocarray = emu_reallocarray;
  for (int i = 0; i < 8; ++i) g_real.new_[i] = next_operator(kNewNames[i]);
  for (int i = 0; i < 12; ++i) g_real.delete_[i] = next_operator(kDeleteNames[i]);
}

bool cpu_has_invariant_tsc() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d >> 8) & 1u;
#else
  return false;
#endif
}

pid_t (*g_real_fork)() = nullptr;  // glibc's _Fork, found at its first call

void after_fork_child() {
  memory_after_fork();
  if (!g_dir) return;
  if (!g_follow_fork && !note_unfollowed(g_dir, "fork")) sink_count_unnoted(false);
  if (g_ptwrite) {
    // perf traces the child too (inherit): a followed child marks itself and
    // numbers its events from 0; any other stops.
    if (!(g_follow_fork && ptwrite_open(g_dir))) __atomic_store_n(&g_capturing, false, __ATOMIC_RELAXED);
    return;
  }
  sink_after_fork(g_follow_fork, g_dir);
}

// Whether this process image is captured, and with which clock.
void start_capture() {
  const char* dir = getenv("HEAPLAB_CAPTURE_DIR");
  if (!dir || !*dir) return;  // loaded without heaplab capture: pass through
  const char* follow = getenv("HEAPLAB_CAPTURE_FOLLOW");
  bool follow_exec = follow && strstr(follow, "exec");
  g_follow_fork = follow && strstr(follow, "fork");
  if (const char* spare = getenv("HEAPLAB_CAPTURE_SPARE")) {
    char* end = nullptr;
    const long fd = strtol(spare, &end, 10);
    if (end != spare && *end == 0 && fd >= 3 && fd < (1L << 20)) sink_set_spare(int(fd));
  }
  const char* root = getenv("HEAPLAB_CAPTURE_ROOT");
  bool is_root = root && strtol(root, nullptr, 10) == long(getpid());
  if (!((is_root && sink_first_image(dir)) || follow_exec)) {
    // heaplab capture names what it did not follow (or counts it, on a full disk)
    if (!note_unfollowed(dir, "exec")) sink_count_unnoted(true);
    return;
  }
  g_dir = dir;
  const char* clock = getenv("HEAPLAB_CAPTURE_CLOCK");
  bool tsc = cpu_has_invariant_tsc();
  if (clock && strcmp(clock, "monotonic") == 0) tsc = false;
#if defined(__x86_64__)
  if (clock && strcmp(clock, "tsc") == 0) tsc = true;  // asked for, even if not invariant
#endif
  const char* sink = getenv("HEAPLAB_CAPTURE_SINK");
  if (sink && strcmp(sink, "ptwrite") == 0) {
    if (cpu_has_ptwrite()) {
      if (!ptwrite_open(dir)) g_dir = nullptr;
      return;
    }
    // Executing ptwrite here would raise SIGILL: fall back or refuse.
    const char* missing = getenv("HEAPLAB_CAPTURE_NO_PTWRITE");
    if (!missing || strcmp(missing, "fallback") != 0) {
      shim_error(
          "this CPU has no ptwrite (CPUID.(EAX=14H,ECX=0):EBX[4] is 0); refusing to run the program "
          "(HEAPLAB_CAPTURE_NO_PTWRITE=fallback records into files instead)",
          0);
      _exit(127);
    }
    shim_error("this CPU has no ptwrite (CPUID.(EAX=14H,ECX=0):EBX[4] is 0); recording into files instead", 0);
  }
  if (!sink_open(SinkConfig{dir, tsc, false})) {
    g_dir = nullptr;
    return;
  }
  if (const char* every = getenv("HEAPLAB_CAPTURE_LATENCY")) g_latency_every = uint32_t(strtoul(every, nullptr, 10));
  if (const char* live = getenv("HEAPLAB_CAPTURE_LIVE")) g_live_reader_coming = strcmp(live, "1") == 0;
  // Watched only if this process sees it (not from inside another PID
  // namespace, where its number means nothing).
  if (const char* launcher = getenv("HEAPLAB_CAPTURE_LAUNCHER")) {
    const pid_t pid = pid_t(strtol(launcher, nullptr, 10));
    if (pid > 0 && kill(pid, 0) == 0) g_launcher = pid;
  }
}

// The fast path's cost per event: malloc+free pairs through the hooks
// against the same pairs straight to the allocator, the hooks writing into
// a scratch block (not the capture). Median of 7 rounds of 256 pairs.
void calibrate() {
  if (!g_capturing || g_ptwrite) return;
  alignas(65536) static char scratch[65536];
  const ThreadSink saved = t_sink;
  const uint64_t saved_overhead = t_overhead;
  const uint32_t every = g_latency_every;
  g_latency_every = 0;
  constexpr int kRounds = 7, kPairs = 256;
  uint64_t cost[kRounds];
  for (int round = 0; round < kRounds; ++round) {
    t_sink.cur = uint64_t(scratch) + raw::kBlockHeaderSize;
    const uint64_t t0 = stamp();
    for (int i = 0; i < kPairs; ++i) hook_free(hook_malloc(24));
    const uint64_t t1 = stamp();
    for (int i = 0; i < kPairs; ++i) g_real.free(g_real.malloc(24));
    const uint64_t t2 = stamp();
    const uint64_t hooked = t1 - t0, direct = t2 - t1;
    cost[round] = hooked > direct ? (hooked - direct) * 1024 / (2 * kPairs) : 0;
  }
  t_sink = saved;
  t_overhead = saved_overhead;
  g_latency_every = every;
  for (int i = 1; i < kRounds; ++i)  // insertion sort: the median
    for (int j = i; j > 0 && cost[j] < cost[j - 1]; --j) {
      uint64_t x = cost[j];
      cost[j] = cost[j - 1];
      cost[j - 1] = x;
    }
  // What two fenced clock reads add to a timed call: the least of many.
  uint64_t timer = ~uint64_t{0};
  for (int i = 0; i < 64; ++i) {
    const uint64_t a = timer_begin(), b = timer_end();
    if (b - a < timer) timer = b - a;
  }
  sink_set_event_cost(cost[kRounds / 2], timer);
}

}  // namespace

void* boot_alloc(size_t n, size_t align) {
  if (align < 16) align = 16;
  size_t start = (g_boot_used + sizeof(BootHeader) + align - 1) & ~(align - 1);
  if (n > g_boot_size || start + n > g_boot_size) fatal("bootstrap arena exhausted during start-up");
  reinterpret_cast<BootHeader*>(g_boot + start)[-1].size = n;
  g_boot_used = start + n;
  return g_boot + start;
}

void* boot_realloc(void* old, size_t n) {
  size_t old_size = reinterpret_cast<BootHeader*>(old)[-1].size;
  void* p = hook_malloc(n);
  if (p) memcpy(p, old, old_size < n ? old_size : n);
  return p;
}

void init() {
  int expected = 0;
  // Signals wait while the shim starts: a handler that allocated now would be
  // served from the boot arena and never recorded (the arena is for the
  // shim's own calls, from dlsym), or recorded into calibrate()'s scratch
  // block. Held ones arrive once recording runs. Not the signals of a fault:
  // blocked, a fault kills the process even where a handler would take it.
  sigset_t all, old;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS}) sigdelset(&all, sig);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  if (__atomic_compare_exchange_n(&g_state, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    g_init_thread = pthread_self();
    resolve();
    pthread_atfork(nullptr, nullptr, after_fork_child);
    start_capture();
    __atomic_store_n(&g_state, 2, __ATOMIC_RELEASE);
    calibrate();  // (its events go to a scratch block: a handler's would too)
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (expected == 2) return;
  // Initialising: this thread (re-entered from dlsym) uses the boot arena;
  // any other thread waits.
  if (pthread_equal(g_init_thread, pthread_self())) return;
  while (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != 2) sched_yield();
}

void* new_emulated(size_t n, size_t align) {
  // libstdc++'s definitions: size 0 becomes 1; aligned sizes round up to the
  // alignment (aligned_alloc's rule); retry after the new-handler; nullptr
  // when there is none (the caller records the failure, then throws).
  if (n == 0) n = 1;
  if (align && align < sizeof(void*)) align = sizeof(void*);
  for (;;) {
    void* p;
    if (align == 0) {
      p = g_real.malloc(n);
    } else {
      size_t rounded = (n + align - 1) & ~(align - 1);
      p = rounded < n ? nullptr : g_real.aligned_alloc(align, rounded);
    }
    if (p) return p;
    using Handler = void (*)();
    auto get = reinterpret_cast<Handler (*)()>(dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv"));
    Handler h = get ? get() : nullptr;
    if (!h) return nullptr;
    h();
  }
}

void throw_bad_alloc() {
  auto thrower = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "_ZSt17__throw_bad_allocv"));
  if (thrower) thrower();
  fatal("operator new failed and std::bad_alloc cannot be thrown (no libstdc++)");
}

pid_t hook_fork_without_handlers() {
  pid_t (*real)() = __atomic_load_n(&g_real_fork, __ATOMIC_ACQUIRE);
  if (real == nullptr) {
    real = reinterpret_cast<pid_t (*)()>(next_symbol("_Fork"));
    __atomic_store_n(&g_real_fork, real, __ATOMIC_RELEASE);
  }
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  const pid_t pid = real();
  if (pid == 0) after_fork_child();
  return pid;
}

namespace {

// syscall(2) itself: on x86-64 the instruction (no symbol to look up, so
// no dlsym, which may allocate, from inside an allocator that calls it),
// elsewhere the next definition.
long raw_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5) {
#if defined(__x86_64__)
  long r;
  register long r10 asm("r10") = a3;
  register long r8 asm("r8") = a4;
  register long r9 asm("r9") = a5;
  asm volatile("syscall"
               : "=a"(r)
               : "a"(n), "D"(a0), "S"(a1), "d"(a2), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  if (static_cast<unsigned long>(r) > -4096UL) {
    errno = int(-r);
    return -1;
  }
  return r;
#else
  static long (*real)(long, ...) = nullptr;
  if (!real) real = reinterpret_cast<long (*)(long, ...)>(next_symbol("syscall"));
  return real ? real(n, a0, a1, a2, a3, a4, a5) : (errno = ENOSYS, -1);
#endif
}

// Clones the shim leaves alone: their child shares the parent's memory, or
// its descriptor table (the child handler closes the raw files'
// descriptors, which would stop the parent's capture).
// (CLONE_SETTLS: the child's thread-local storage is not the shim's, and its
// handler would read and write the shim's thread state there.)
constexpr long kSharing = CLONE_VM | CLONE_VFORK | CLONE_THREAD | CLONE_FILES | CLONE_SETTLS;
#if defined(__x86_64__)
static_assert(SYS_clone == 56 && SYS_clone3 == 435 && kSharing == 0x94500, "interpose.cpp's syscall entry");
#endif

// Whether a raw system call makes a new process that goes on from here, on
// this stack (its child returns from the call, as from fork()).
bool forks_here(long n, long a0, long a1) {
#if defined(SYS_fork)
  if (n == SYS_fork) return true;
#endif
  if (n == SYS_clone) return (a0 & kSharing) == 0 && a1 == 0;  // (flags, new stack, ...)
#if defined(SYS_clone3)
  if (n == SYS_clone3 && a0 != 0 && a1 >= 48) {  // struct clone_args: flags at 0, stack at 40
    uint64_t flags, stack;
    memcpy(&flags, reinterpret_cast<const char*>(a0), 8);
    memcpy(&stack, reinterpret_cast<const char*>(a0) + 40, 8);
    return (flags & uint64_t(kSharing)) == 0 && stack == 0;
  }
#endif
  return false;
}

// clone(3)'s child without CLONE_VM starts in a copy of the parent's memory:
// the function and its argument, on the parent's stack when it called, are
// in the child's copy too. Its stack may be small (runc's is 4 KiB), and
// may sit just above that copy: they are read first, and the child handler
// (8 KiB of paths) runs on a stack of the shim's own, static (the child's
// private copy; it has one thread).
struct CloneStart {
  int (*fn)(void*);
  void* arg;
};
ucontext_t g_clone_caller, g_clone_handler;
void clone_child_handler() { after_fork_child(); }
int clone_child(void* p) {
  const CloneStart start = *static_cast<const CloneStart*>(p);
  if (getcontext(&g_clone_handler) == 0) {
    g_clone_handler.uc_stack.ss_sp = heaplab_clone_stack;
    g_clone_handler.uc_stack.ss_size = sizeof heaplab_clone_stack;
    g_clone_handler.uc_link = &g_clone_caller;
    makecontext(&g_clone_handler, clone_child_handler, 0);
    if (swapcontext(&g_clone_caller, &g_clone_handler) != 0) after_fork_child();
  } else {
    after_fork_child();
  }
  return start.fn(start.arg);
}

}  // namespace

void hook_clone_child() { after_fork_child(); }

long hook_syscall(long n, long a0, long a1, long a2, long a3, long a4, long a5) {
  if (!forks_here(n, a0, a1)) return raw_syscall(n, a0, a1, a2, a3, a4, a5);
  const long r = raw_syscall(n, a0, a1, a2, a3, a4, a5);
  if (r == 0) after_fork_child();
  return r;
}

int hook_clone(int (*fn)(void*), void* stack, int flags, void* arg, void* ptid, void* tls, void* ctid) {
  using Clone = int (*)(int (*)(void*), void*, int, void*, ...);
  static Clone real = nullptr;
  if (!real) real = reinterpret_cast<Clone>(next_symbol("clone"));
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  if ((flags & kSharing) != 0 || fn == nullptr) return real(fn, stack, flags, arg, ptid, tls, ctid);
  CloneStart start{fn, arg};
  return real(clone_child, stack, flags, &start, ptid, tls, ctid);
}

// Start-up runs at the first allocation or here, whichever comes first: a
// program whose first call is mmap is recorded from its first call on.
__attribute__((constructor)) void shim_start() { init(); }

__attribute__((destructor)) void shim_fini() {
  memory_exit_scan();
  sink_close();
}

}  // namespace heaplab::shim
