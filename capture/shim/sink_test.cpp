// Tests of the file sink's record publishing (sink.h, publish()): with the
// TSC and glibc's rseq area, the clock read and the head's store are one
// restartable sequence, which the kernel restarts from its abort handler
// when the thread is preempted or takes a signal inside it; a signal handler
// that writes records of its own before the interrupted one is published
// leaves the thread's records in stamp order, with or without rseq.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/time.h>
#include <ucontext.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "capture/shim/rseq_area.h"
#include "capture/shim/sink.h"

// What publish() reads (the shim defines them in sink_file.cpp).
namespace heaplab::shim {
uint32_t g_clock = raw::kClockTsc;
intptr_t g_rseq_cs_offset = 0;
__thread ThreadSink t_sink __attribute__((tls_model("initial-exec")));
}  // namespace heaplab::shim

#if defined(__x86_64__)
// The bounds of this program's abort handlers (GNU ld defines them for a
// section named like a C identifier).
extern "C" const char __start___rseq_failure[], __stop___rseq_failure[];

namespace heaplab::shim {
namespace {

// A timer signal every 20 us, its handler `handler`, for the test's scope.
class TimerSignal {
 public:
  explicit TimerSignal(void (*handler)(int, siginfo_t*, void*)) {
    struct sigaction sa {};
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ok_ = sigaction(SIGALRM, &sa, &old_) == 0;
    itimerval on{{0, 20}, {0, 20}};
    ok_ = ok_ && setitimer(ITIMER_REAL, &on, nullptr) == 0;
  }
  ~TimerSignal() {
    itimerval off{};
    setitimer(ITIMER_REAL, &off, nullptr);
    sigaction(SIGALRM, &old_, nullptr);
  }
  bool ok() const { return ok_; }

 private:
  struct sigaction old_ {};
  bool ok_ = false;
};

std::atomic<uint64_t> g_signals{0}, g_in_abort{0};
std::atomic<uint64_t> g_abort_ticks{0};  // the clock in the handler of the latest signal that aborted

// Whether the interrupted code resumes in an abort handler: the signal came
// inside the sequence (the kernel moved it there before delivering).
bool in_abort(void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
  const auto ip = uintptr_t(uc->uc_mcontext.gregs[REG_RIP]);
  return ip >= uintptr_t(__start___rseq_failure) && ip < uintptr_t(__stop___rseq_failure);
}

void note_signal(int, siginfo_t*, void* context) {
  g_signals.fetch_add(1, std::memory_order_relaxed);
  if (!in_abort(context)) return;
  _mm_lfence();
  g_abort_ticks.store(__rdtsc() & raw::kTicksMask, std::memory_order_relaxed);
  g_in_abort.fetch_add(1, std::memory_order_relaxed);
}

// Records published while a 20 us timer signal interrupts the loop: a
// signal that lands inside the sequence resumes it in its abort handler,
// which starts again from the clock read, so the record is stamped after the
// handler ran; every record comes out with its op, stamped between the clock
// reads around the call.
TEST(Sink, PublishStartsAgainWhenASignalInterruptsIt) {
  g_rseq_cs_offset = find_rseq_cs_offset();
  if (g_rseq_cs_offset == 0) GTEST_SKIP() << "no rseq area registered";
  raw::Record r{};
  uint64_t published = 0, bad = 0, restarted = 0, stamped_before_handler = 0;
  {
    TimerSignal timer(note_signal);
    ASSERT_TRUE(timer.ok());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (restarted < 100 && std::chrono::steady_clock::now() < until) {
      for (uint32_t i = 0; i < 10000; ++i, ++published) {
        const uint32_t op = i % 52;
        t_sink.cur = reinterpret_cast<uint64_t>(&r + 1);  // (r: the latest reservation)
        const uint64_t aborts = g_in_abort.load(std::memory_order_relaxed);
        _mm_lfence();  // (the reads in order with publish()'s)
        const uint64_t before = __rdtsc() & raw::kTicksMask;
        _mm_lfence();
        publish(&r, op);
        _mm_lfence();
        const uint64_t after = __rdtsc() & raw::kTicksMask;
        const uint64_t ticks = raw::record_ticks(r.head);
        bad += raw::record_op(r.head) != op || ticks < before || ticks > after;
        if (g_in_abort.load(std::memory_order_relaxed) != aborts) {
          ++restarted;
          stamped_before_handler += ticks <= g_abort_ticks.load(std::memory_order_relaxed);
        }
      }
    }
  }
  g_rseq_cs_offset = 0;
  EXPECT_EQ(bad, 0u) << "of " << published;
  EXPECT_GE(restarted, 100u) << "of " << g_signals.load() << " signals, in " << published << " records";
  EXPECT_EQ(stamped_before_handler, 0u) << "of " << restarted << " records whose sequence a signal restarted";
}

// A block-aligned stretch of blocks that emit_like() writes as the shim's
// emit() does: a slot reserved with one non-locked xadd on the thread's
// cursor, the record's words, then publish(). (The blocks' headers are
// stepped over; t_sink.block follows the block the cursor is in.)
constexpr uint64_t kBlocks = 32;
uint8_t* g_blocks = nullptr;

void emit_like(uint32_t op, uint64_t a) {
  for (;;) {
    uint64_t slot = raw::kRecordSize;
    asm volatile("xaddq %0, %1" : "+r"(slot), "+m"(t_sink.cur) : : "memory");
    if ((slot & (raw::kBlockSize - 1)) < raw::kBlockHeaderSize) {
      // (Into the next block, as the shim's switch_block where the full
      // block's last record is reserved and not written: the clock noted
      // in the block left.)
      char* const block = reinterpret_cast<char*>(slot & ~(raw::kBlockSize - 1));
      if (block != t_sink.block) {
        const auto* last = reinterpret_cast<const raw::Record*>(block) - 1;
        auto* note = reinterpret_cast<uint64_t*>(t_sink.block + raw::kPendingTicksOffset);
        if (__atomic_load_n(&last->head, __ATOMIC_RELAXED) == 0 && *note == 0) *note = stamp();
        t_sink.block = block;
      }
      continue;
    }
    auto* r = reinterpret_cast<raw::Record*>(slot);
    r->a = a;
    r->b = 0;
    r->c = 0;
    publish(r, op);
    return;
  }
}

std::atomic<uint64_t> g_handler_records{0};
void emit_in_handler(int, siginfo_t*, void* context) {
  g_signals.fetch_add(1, std::memory_order_relaxed);
  if (in_abort(context)) g_in_abort.fetch_add(1, std::memory_order_relaxed);
  if (t_sink.cur == 0) return;  // (between rounds)
  emit_like(7, 0xf00d);
  g_handler_records.fetch_add(1, std::memory_order_relaxed);
}

// A signal handler that records a call of its own while the interrupted
// emit's record is reserved but not yet published takes the next slot and
// is stamped first: the interrupted record then takes the handler's stamp,
// so the thread's records stay in stamp order in slot order (else a live
// reader lifts the handler's up to it: its free placed after another
// thread's reuse of the address). With rseq, and without.
void records_stay_in_order(intptr_t rseq_offset) {
  const uint64_t bytes = kBlocks * raw::kBlockSize;
  struct Scope {  // (undone however the test ends)
    explicit Scope(intptr_t offset, uint64_t n) {
      g_rseq_cs_offset = offset;
      g_blocks = static_cast<uint8_t*>(std::aligned_alloc(raw::kBlockSize, n));
    }
    ~Scope() {
      std::free(g_blocks);
      g_blocks = nullptr;
      g_rseq_cs_offset = 0;
      t_sink = ThreadSink{};
    }
  } scope(rseq_offset, bytes);
  ASSERT_NE(g_blocks, nullptr);
  uint64_t records = 0, out_of_order = 0, rounds = 0;
  g_handler_records = 0;
  {
    TimerSignal timer(emit_in_handler);
    ASSERT_TRUE(timer.ok());
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    // A round at least, half a second at least, until the handler has
    // recorded 2,000 calls (10 s at most).
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const auto spent = std::chrono::steady_clock::now() - start;
      if (rounds > 0 && spent > std::chrono::milliseconds(500) &&
          (g_handler_records.load() >= 2000 || spent > std::chrono::seconds(10)))
        break;
      sigprocmask(SIG_BLOCK, &alarm, nullptr);
      std::memset(g_blocks, 0, bytes);
      t_sink.block = reinterpret_cast<char*>(g_blocks);
      t_sink.cur = reinterpret_cast<uint64_t>(g_blocks) + raw::kBlockHeaderSize;
      sigprocmask(SIG_UNBLOCK, &alarm, nullptr);
      const uint64_t end = reinterpret_cast<uint64_t>(g_blocks) + bytes - raw::kBlockSize;
      for (uint32_t i = 0; __atomic_load_n(&t_sink.cur, __ATOMIC_RELAXED) < end; ++i) emit_like(i % 40, i);
      sigprocmask(SIG_BLOCK, &alarm, nullptr);
      t_sink.cur = 0;
      sigprocmask(SIG_UNBLOCK, &alarm, nullptr);
      uint64_t last = 0;
      for (uint64_t b = 0; b < kBlocks; ++b) {
        const auto* recs = reinterpret_cast<const raw::Record*>(g_blocks + b * raw::kBlockSize + raw::kBlockHeaderSize);
        for (uint64_t k = 0; k < raw::kRecordsPerBlock; ++k) {
          if (recs[k].head == 0) continue;
          const uint64_t ticks = raw::record_ticks(recs[k].head);
          out_of_order += ticks < last;
          last = std::max(last, ticks);
          ++records;
        }
      }
      ++rounds;
    }
  }
  EXPECT_EQ(out_of_order, 0u) << "of " << records << " records, " << g_handler_records.load() << " by the handler";
  EXPECT_GE(g_handler_records.load(), 2000u);
}

TEST(Sink, AHandlersRecordsKeepTheThreadsStampOrderWithRseq) {
  const intptr_t offset = find_rseq_cs_offset();
  if (offset == 0) GTEST_SKIP() << "no rseq area registered";
  records_stay_in_order(offset);
}

TEST(Sink, AHandlersRecordsKeepTheThreadsStampOrderWithoutRseq) { records_stay_in_order(0); }

}  // namespace
}  // namespace heaplab::shim
#endif

namespace heaplab::shim {
namespace {

// Without rseq (or with the monotonic clock): the same record, stamped now.
TEST(Sink, PublishWithoutRseq) {
  g_rseq_cs_offset = 0;
  raw::Record r{};
  t_sink.cur = reinterpret_cast<uint64_t>(&r + 1);
  const uint64_t before = stamp() & raw::kTicksMask;
  publish(&r, 7);
  EXPECT_EQ(raw::record_op(r.head), 7u);
  EXPECT_GE(raw::record_ticks(r.head), before);
  EXPECT_LE(raw::record_ticks(r.head), stamp() & raw::kTicksMask);
}

// A handler's record already written after this one's slot: this one takes
// its stamp (an earlier one than now), in the next slot or, from a block's
// last slot, the clock the handler noted as it moved the thread on; with no
// note (the handler's capture stopped), its own stamp; an earlier stamp of
// its own is kept. A fork child (its sink reset) writes nothing.
TEST(Sink, ARecordAHandlerWroteAfterGivesItsStamp) {
  struct Blocks {
    Blocks() : p(static_cast<uint8_t*>(std::aligned_alloc(raw::kBlockSize, 2 * raw::kBlockSize))) {
      if (p) std::memset(p, 0, 2 * raw::kBlockSize);
    }
    ~Blocks() {
      std::free(p);
      t_sink = ThreadSink{};
    }
    uint8_t* p;
  } blocks;
  ASSERT_NE(blocks.p, nullptr);
  auto* recs = reinterpret_cast<raw::Record*>(blocks.p + raw::kBlockHeaderSize);
  t_sink.block = reinterpret_cast<char*>(blocks.p);
  recs[1].head = raw::record_head(9, 12345);
  t_sink.cur = reinterpret_cast<uint64_t>(&recs[2]);
  publish(&recs[0], 3);
  EXPECT_EQ(recs[0].head, raw::record_head(3, 12345));

  publish_after_handler(&recs[0], 3, 12000);  // (its own, earlier)
  EXPECT_EQ(recs[0].head, raw::record_head(3, 12000));

  auto* next = reinterpret_cast<raw::Record*>(blocks.p + raw::kBlockSize + raw::kBlockHeaderSize);
  next[0].head = raw::record_head(9, 23457);
  next[1].head = raw::record_head(9, 23458);
  auto* note = reinterpret_cast<uint64_t*>(blocks.p + raw::kPendingTicksOffset);
  *note = 23456;  // (the handler's switch_block)
  t_sink.block = reinterpret_cast<char*>(blocks.p + raw::kBlockSize);
  t_sink.cur = reinterpret_cast<uint64_t>(&next[2]);
  raw::Record* last = &recs[raw::kRecordsPerBlock - 1];
  publish(last, 4);
  EXPECT_EQ(last->head, raw::record_head(4, 23456));

  // The handler moved the thread to no block (capture stopped): now.
  last->head = 0;
  *note = 0;
  t_sink.block = reinterpret_cast<char*>(blocks.p);
  t_sink.cur = 0;
  const uint64_t before = stamp() & raw::kTicksMask;
  publish(last, 5);
  EXPECT_EQ(raw::record_op(last->head), 5u);
  EXPECT_GE(raw::record_ticks(last->head), before);

  // A fork child's reset sink: the record is not its to write.
  last->head = 0;
  t_sink = ThreadSink{};
  publish(last, 6);
  EXPECT_EQ(last->head, 0u);
}

}  // namespace
}  // namespace heaplab::shim
