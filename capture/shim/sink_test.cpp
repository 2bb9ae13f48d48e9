// Tests of the file sink's record publishing (sink.h, publish()): with the
// TSC and glibc's rseq area, the clock read and the head's store are one
// restartable sequence, which the kernel restarts from its abort handler
// when the thread is preempted or takes a signal inside it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/time.h>
#include <ucontext.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define HAVE_RSEQ 1
#else
#define HAVE_RSEQ 0
#endif

#include "capture/shim/sink.h"

// What publish() reads (the shim defines them in sink_file.cpp).
namespace heaplab::shim {
uint32_t g_clock = raw::kClockTsc;
intptr_t g_rseq_cs_offset = 0;
}  // namespace heaplab::shim

#if defined(__x86_64__) && HAVE_RSEQ
// The bounds of this program's abort handlers (GNU ld defines them for a
// section named like a C identifier).
extern "C" const char __start___rseq_failure[], __stop___rseq_failure[];

namespace heaplab::shim {
namespace {

std::atomic<uint64_t> g_signals{0}, g_in_abort{0};

// Where the interrupted thread resumes: in an abort handler when the signal
// came inside the sequence (the kernel moved it there before delivering).
void on_alarm(int, siginfo_t*, void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
  const auto ip = uintptr_t(uc->uc_mcontext.gregs[REG_RIP]);
  g_signals.fetch_add(1, std::memory_order_relaxed);
  if (ip >= uintptr_t(__start___rseq_failure) && ip < uintptr_t(__stop___rseq_failure))
    g_in_abort.fetch_add(1, std::memory_order_relaxed);
}

// Records published while a 20 us timer signal interrupts the loop: signals
// that land inside the sequence resume in its abort handler, which starts it
// again; every record comes out whole, its op as given and its stamp between
// the clock read before the call and the one after.
TEST(Sink, PublishStartsAgainWhenASignalInterruptsIt) {
  if (__rseq_size < offsetof(struct rseq, rseq_cs) + sizeof(uint64_t)) GTEST_SKIP() << "no rseq area registered";
  g_rseq_cs_offset = intptr_t(__rseq_offset) + intptr_t(offsetof(struct rseq, rseq_cs));
  struct sigaction sa {
  }, old{};
  sa.sa_sigaction = on_alarm;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGALRM, &sa, &old), 0);
  itimerval on{{0, 20}, {0, 20}}, off{};
  ASSERT_EQ(setitimer(ITIMER_REAL, &on, nullptr), 0);
  raw::Record r{};
  uint64_t published = 0, bad = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (g_in_abort.load(std::memory_order_relaxed) < 100 && std::chrono::steady_clock::now() < until) {
    for (uint32_t i = 0; i < 10000; ++i, ++published) {
      const uint32_t op = i % 52;
      _mm_lfence();  // (the reads in order with publish()'s)
      const uint64_t before = __rdtsc() & raw::kTicksMask;
      _mm_lfence();
      publish(&r, op);
      _mm_lfence();
      const uint64_t after = __rdtsc() & raw::kTicksMask;
      const uint64_t ticks = raw::record_ticks(r.head);
      bad += raw::record_op(r.head) != op || ticks < before || ticks > after;
    }
  }
  setitimer(ITIMER_REAL, &off, nullptr);
  sigaction(SIGALRM, &old, nullptr);
  g_rseq_cs_offset = 0;
  EXPECT_EQ(bad, 0u) << "of " << published;
  EXPECT_GE(g_in_abort.load(), 100u) << "of " << g_signals.load() << " signals, in " << published << " records";
}

}  // namespace
}  // namespace heaplab::shim
#endif

namespace heaplab::shim {
namespace {

// Without rseq (or with the monotonic clock): the same record, stamped now.
TEST(Sink, PublishWithoutRseq) {
  g_rseq_cs_offset = 0;
  raw::Record r{};
  const uint64_t before = stamp() & raw::kTicksMask;
  publish(&r, 7);
  EXPECT_EQ(raw::record_op(r.head), 7u);
  EXPECT_GE(raw::record_ticks(r.head), before);
  EXPECT_LE(raw::record_ticks(r.head), stamp() & raw::kTicksMask);
}

}  // namespace
}  // namespace heaplab::shim
