// Tests of the replay loop (run_steps) against a recording backend: which
// backend function each step calls and with which arguments, how NULL
// results, throwing operator new and failed reallocs are handled, how
// allocated memory is touched, cross-thread consumes, and paced replay.
#include "replay/engine.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"
#include "replay/plan.h"
#include "replay/plan_testutil.h"

namespace heaplab::replay {
namespace {

using trace::Event;
using trace::Op;
using trace::TraceReader;
using trace::WriterOptions;
using trace::testutil::alloc;
using trace::testutil::ev;
using trace::testutil::release;
using trace::testutil::TempDir;

constexpr unsigned idx(Op op) { return static_cast<unsigned>(op); }
constexpr uint8_t kFailedFlags = trace::kNullResult | trace::kFailed;

// ------------------------------------------------------------ recording backend

// One backend call: the pointer it was given (consumers, realloc), its other
// arguments in the order of the backend function's parameters, its result,
// and when it was made.
struct Call {
  Op op;
  void* ptr = nullptr;
  uint64_t a = 0, b = 0;
  void* ret = nullptr;
  uint64_t at = 0;
};

// A backend (a struct of static functions, like allocators::LibcApi) that
// logs every call and allocates with the C library. Each replay thread logs
// into its own lane (set `lane` in the thread before it calls run_steps), so
// the backend adds no synchronisation between threads of its own: under TSan
// only the engine's slot handoff orders a producer before its consumer.
struct Recording {
  static constexpr const char* kName = "recording";
  static nlohmann::json describe() { return {{"version", "test"}, {"library", "none"}}; }
  static nlohmann::json stats() { return nlohmann::json::object(); }

  static constexpr int kLanes = 4;
  static inline std::array<std::vector<Call>, kLanes> logs;
  static inline thread_local int lane = 0;
  // Allocations of this size return NULL (0: none); operator new throws.
  static inline uint64_t null_size = 0;
  // If set, realloc sleeps this long between allocating the new block and
  // freeing the old one (a slow move), after counting itself in
  // reallocs_entered. Set before the replay threads start.
  static inline unsigned realloc_sleep_ms = 0;
  static inline std::atomic<int> reallocs_entered{0};

  static void reset() {
    for (auto& l : logs) l.clear();
    null_size = 0;
    realloc_sleep_ms = 0;
    reallocs_entered.store(0);
  }
  static void* log(Op op, void* ptr, uint64_t a, uint64_t b, void* ret) {
    logs[lane].push_back(Call{op, ptr, a, b, ret, monotonic_ns()});
    return ret;
  }
  // Memory of every call, aligned to at least `align`; NULL for null_size.
  static void* raw(size_t n, size_t align = 0) {
    if (null_size != 0 && n == null_size) return nullptr;
    void* p = nullptr;
    if (::posix_memalign(&p, std::max<size_t>(align, 16), n ? n : 1) != 0) return nullptr;
    return p;
  }
  static void* raw_or_throw(Op op, size_t n, size_t align, uint64_t a, uint64_t b) {
    void* p = raw(n, align);
    log(op, nullptr, a, b, p);
    if (!p) throw std::bad_alloc();
    return p;
  }
  static void release(Op op, void* p, uint64_t a = 0, uint64_t b = 0) {
    log(op, p, a, b, nullptr);
    ::free(p);
  }

  static void* malloc(size_t n) { return log(Op::malloc, nullptr, n, 0, raw(n)); }
  static void* calloc(size_t c, size_t n) {
    void* p = raw(c * n);
    if (p) std::memset(p, 0, c * n);
    return log(Op::calloc, nullptr, c, n, p);
  }
  // Always moves (a new block, then the old one freed), so that the old and
  // new pointers differ.
  static void* realloc(void* p, size_t n) {
    if (realloc_sleep_ms) reallocs_entered.fetch_add(1, std::memory_order_release);
    void* q = raw(n);
    if (realloc_sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(realloc_sleep_ms));
    if (q) ::free(p);
    return log(Op::realloc, p, n, 0, q);
  }
  static void* reallocarray(void* p, size_t c, size_t n) {
    void* q = raw(c * n);
    if (q) ::free(p);
    return log(Op::reallocarray, p, c, n, q);
  }
  static void free(void* p) { release(Op::free, p); }
  static void* memalign(size_t a, size_t n) { return log(Op::memalign, nullptr, a, n, raw(n, a)); }
  static int posix_memalign(void** p, size_t a, size_t n) {
    *p = raw(n, a);
    log(Op::posix_memalign, nullptr, a, n, *p);
    return *p ? 0 : ENOMEM;
  }
  static void* aligned_alloc(size_t a, size_t n) { return log(Op::aligned_alloc, nullptr, a, n, raw(n, a)); }
  static void* valloc(size_t n) { return log(Op::valloc, nullptr, n, 0, raw(n, 4096)); }
  static void* pvalloc(size_t n) { return log(Op::pvalloc, nullptr, n, 0, raw(n, 4096)); }

  static void* op_new(size_t n) { return raw_or_throw(Op::op_new, n, 0, n, 0); }
  static void* op_new_array(size_t n) { return raw_or_throw(Op::op_new_array, n, 0, n, 0); }
  static void* op_new_nothrow(size_t n) { return log(Op::op_new_nothrow, nullptr, n, 0, raw(n)); }
  static void* op_new_array_nothrow(size_t n) { return log(Op::op_new_array_nothrow, nullptr, n, 0, raw(n)); }
  static void* op_new_aligned(size_t n, size_t a) { return raw_or_throw(Op::op_new_aligned, n, a, n, a); }
  static void* op_new_array_aligned(size_t n, size_t a) { return raw_or_throw(Op::op_new_array_aligned, n, a, n, a); }
  static void* op_new_aligned_nothrow(size_t n, size_t a) {
    return log(Op::op_new_aligned_nothrow, nullptr, n, a, raw(n, a));
  }
  static void* op_new_array_aligned_nothrow(size_t n, size_t a) {
    return log(Op::op_new_array_aligned_nothrow, nullptr, n, a, raw(n, a));
  }

  static void op_delete(void* p) { release(Op::op_delete, p); }
  static void op_delete_array(void* p) { release(Op::op_delete_array, p); }
  static void op_delete_sized(void* p, size_t n) { release(Op::op_delete_sized, p, n); }
  static void op_delete_array_sized(void* p, size_t n) { release(Op::op_delete_array_sized, p, n); }
  static void op_delete_aligned(void* p, size_t a) { release(Op::op_delete_aligned, p, a); }
  static void op_delete_array_aligned(void* p, size_t a) { release(Op::op_delete_array_aligned, p, a); }
  static void op_delete_sized_aligned(void* p, size_t n, size_t a) { release(Op::op_delete_sized_aligned, p, n, a); }
  static void op_delete_array_sized_aligned(void* p, size_t n, size_t a) {
    release(Op::op_delete_array_sized_aligned, p, n, a);
  }
  static void op_delete_nothrow(void* p) { release(Op::op_delete_nothrow, p); }
  static void op_delete_array_nothrow(void* p) { release(Op::op_delete_array_nothrow, p); }
  static void op_delete_aligned_nothrow(void* p, size_t a) { release(Op::op_delete_aligned_nothrow, p, a); }
  static void op_delete_array_aligned_nothrow(void* p, size_t a) { release(Op::op_delete_array_aligned_nothrow, p, a); }
};

// A backend that hands out blocks of a zeroed arena owned by the test (one
// block every 16 KiB) and never frees, so that the test can look at what
// the engine wrote.
struct Arena : Recording {
  static constexpr size_t kBlock = 16384;
  alignas(4096) static inline unsigned char mem[4 * kBlock];
  static inline size_t used = 0;

  static void reset() {
    std::memset(mem, 0, sizeof mem);
    used = 0;
    Recording::reset();
  }
  static void* take(size_t n) {
    if (n > kBlock || used == sizeof mem) return nullptr;
    void* p = mem + used;
    used += kBlock;
    return p;
  }
  static void* malloc(size_t n) { return log(Op::malloc, nullptr, n, 0, take(n)); }
  static void* calloc(size_t c, size_t n) { return log(Op::calloc, nullptr, c, n, take(c * n)); }
  static void free(void* p) { log(Op::free, p, 0, 0, nullptr); }
};

// Frees what the logged calls allocated and nothing freed (results the trace
// never frees, objects live at the end), so that leak checkers stay quiet.
void free_leftovers() {
  std::map<void*, int> live;
  for (const auto& l : Recording::logs)
    for (const Call& c : l) {
      if (c.ret) ++live[c.ret];
      const bool releases = !trace::op_produces(c.op) || ((c.op == Op::realloc || c.op == Op::reallocarray) && c.ret);
      if (c.ptr && releases) --live[c.ptr];
    }
  for (auto& [p, n] : live) {
    const auto* c = static_cast<const unsigned char*>(p);
    if (c >= Arena::mem && c < Arena::mem + sizeof Arena::mem) continue;  // not malloc'd
    for (; n > 0; --n) ::free(p);
  }
}

// ------------------------------------------------------------ plans

// A plan built from `events` (the writer fills in seq and ids) and mapped.
struct Plan {
  PlanSummary summary;
  int fd = -1;
  std::unique_ptr<MappedPlan> mapped;
  std::unique_ptr<Slot[]> table;

  // `found_gone`: the trace's thread_ends say the threads had gone
  // (capture.thread_ends): threads that never ran at once run one after another.
  Plan(std::vector<Event>& events, bool timestamps = false, bool found_gone = false) {
    TempDir dir;
    WriterOptions wo;
    wo.timestamps = timestamps;
    if (found_gone) wo.metadata_json = R"({"capture":{"thread_ends":"found_gone"}})";
    trace::testutil::write_trace(dir.file("t.hlt"), events, wo);
    auto r = TraceReader::open(dir.file("t.hlt"));
    PlanOptions opt;
    opt.times = timestamps;
    fd = build_plan(*r, opt, summary);
    mapped = std::make_unique<MappedPlan>(fd);
    reset_table();
    dense = heaplab::replay::testutil::dense_steps(*mapped);
    for (uint32_t t = 0; t < mapped->threads(); ++t) {
      size_t j = 0;
      for (const PlanStep* s = begin(t); s != end(t); ++s) {
        if (s->op() == heaplab::replay::kStepHandoff || s->op() == heaplab::replay::kStepExt) continue;
        if (!heaplab::replay::ref_is_old(s->op()) && s->ref() != 0) ref_of[dense[t].at(j).id()] = s->ref();
        ++j;
      }
    }
  }
  ~Plan() {
    mapped.reset();
    if (fd >= 0) close(fd);
  }
  void reset_table() {
    table.reset(new Slot[mapped->slots() + 1]());
    table[0].store(heaplab::replay::kNullObject);  // the engine's contract: slot 0 is NULL
  }
  const PlanStep* begin(uint32_t t) const { return mapped->steps(t); }
  const PlanStep* end(uint32_t t) const { return mapped->steps(t) + mapped->step_count(t); }
  // The steps with dense ids (replay/plan_testutil.h), and each dense id's ref.
  std::vector<std::vector<Step>> dense;
  std::map<uint64_t, uint64_t> ref_of;
  // What the slot of dense id `id` holds for it: its pointer (or
  // kNullObject), or kOverwritten once a later object took the slot.
  static constexpr uintptr_t kOverwritten = ~uintptr_t{0};
  uintptr_t slot(uint64_t id) const {
    const uint64_t ref = ref_of.at(id);
    const uintptr_t v = table[heaplab::replay::ref_slot(ref)].load();
    if ((v >> heaplab::replay::kValueGenerationShift) != heaplab::replay::ref_generation(ref)) return kOverwritten;
    return v & heaplab::replay::kPointerMask;
  }

  // Runs replay thread t's steps on the calling thread.
  template <class B = Recording>
  void run(ThreadResult& r, uint32_t t = 0, Touch touch = Touch::none) {
    RunParams prm;
    prm.table = table.get();
    prm.touch = touch;
    run_steps<B>(begin(t), end(t), prm, r);
  }
};

Event with(Event e, uint64_t size, uint64_t align = 0, uint64_t count = 0) {
  e.size = size;
  e.align = align;
  e.count = count;
  return e;
}
Event consume(Op op, uint64_t old, uint64_t size = 0, uint64_t align = 0) {
  Event e = ev(op);
  e.old = old;
  e.size = size;
  e.align = align;
  return e;
}
Event failed(Event e) {
  e.flags = kFailedFlags;
  return e;
}

class Engine : public ::testing::Test {
 protected:
  void SetUp() override { Arena::reset(); }
  void TearDown() override {
    free_leftovers();
    Recording::reset();
  }
  static const std::vector<Call>& log(int lane = 0) { return Recording::logs[lane]; }
};

// ------------------------------------------------------------ every op

// Each step calls exactly the matching backend function, with the recorded
// size, count and alignment in the function's parameter order and the
// pointer the producing call returned; ThreadResult counts calls per op.
TEST_F(Engine, EveryOpCallsItsBackendFunctionWithItsArguments) {
  struct Want {
    Op op;
    uint64_t old_id;  // object whose pointer the call gets (0: NULL)
    uint64_t a, b;    // the other arguments, in parameter order
  };
  const std::vector<Want> want = {
      {Op::malloc, 0, 11, 0},                          // id 1
      {Op::calloc, 0, 3, 12},                          // id 2: calloc(count, size)
      {Op::realloc, 1, 13, 0},                         // id 3
      {Op::reallocarray, 2, 4, 14},                    // id 4: (p, count, size)
      {Op::memalign, 0, 64, 15},                       // id 5: (align, size)
      {Op::posix_memalign, 0, 128, 16},                // id 6: (&p, align, size)
      {Op::aligned_alloc, 0, 256, 17},                 // id 7: (align, size)
      {Op::valloc, 0, 18, 0},                          // id 8
      {Op::pvalloc, 0, 19, 0},                         // id 9
      {Op::op_new, 0, 20, 0},                          // id 10
      {Op::op_new_array, 0, 21, 0},                    // id 11
      {Op::op_new_nothrow, 0, 22, 0},                  // id 12
      {Op::op_new_array_nothrow, 0, 23, 0},            // id 13
      {Op::op_new_aligned, 0, 24, 32},                 // id 14: (size, align)
      {Op::op_new_array_aligned, 0, 25, 64},           // id 15
      {Op::op_new_aligned_nothrow, 0, 26, 128},        // id 16
      {Op::op_new_array_aligned_nothrow, 0, 27, 256},  // id 17
      {Op::free, 3, 0, 0},
      {Op::op_delete, 4, 0, 0},
      {Op::op_delete_array, 5, 0, 0},
      {Op::op_delete_sized, 6, 16, 0},  // (p, size)
      {Op::op_delete_array_sized, 7, 17, 0},
      {Op::op_delete_aligned, 8, 4096, 0},  // (p, align)
      {Op::op_delete_array_aligned, 9, 4096, 0},
      {Op::op_delete_sized_aligned, 10, 20, 16},  // (p, size, align)
      {Op::op_delete_array_sized_aligned, 11, 21, 16},
      {Op::op_delete_nothrow, 12, 0, 0},
      {Op::op_delete_array_nothrow, 13, 0, 0},
      {Op::op_delete_aligned_nothrow, 14, 32, 0},
      {Op::op_delete_array_aligned_nothrow, 15, 64, 0},
      {Op::free, 16, 0, 0},
      {Op::free, 17, 0, 0},
      {Op::free, 0, 0, 0},  // free(NULL)
  };
  std::vector<Event> evs = {
      with(ev(Op::malloc), 11),
      with(ev(Op::calloc), 12, 0, 3),
      with(consume(Op::realloc, 1), 13),
      with(consume(Op::reallocarray, 2), 14, 0, 4),
      with(ev(Op::memalign), 15, 64),
      with(ev(Op::posix_memalign), 16, 128),
      with(ev(Op::aligned_alloc), 17, 256),
      with(ev(Op::valloc), 18),
      with(ev(Op::pvalloc), 19),
      with(ev(Op::op_new), 20),
      with(ev(Op::op_new_array), 21),
      with(ev(Op::op_new_nothrow), 22),
      with(ev(Op::op_new_array_nothrow), 23),
      with(ev(Op::op_new_aligned), 24, 32),
      with(ev(Op::op_new_array_aligned), 25, 64),
      with(ev(Op::op_new_aligned_nothrow), 26, 128),
      with(ev(Op::op_new_array_aligned_nothrow), 27, 256),
      consume(Op::free, 3),
      consume(Op::op_delete, 4),
      consume(Op::op_delete_array, 5),
      consume(Op::op_delete_sized, 6, 16),
      consume(Op::op_delete_array_sized, 7, 17),
      consume(Op::op_delete_aligned, 8, 0, 4096),
      consume(Op::op_delete_array_aligned, 9, 0, 4096),
      consume(Op::op_delete_sized_aligned, 10, 20, 16),
      consume(Op::op_delete_array_sized_aligned, 11, 21, 16),
      consume(Op::op_delete_nothrow, 12),
      consume(Op::op_delete_array_nothrow, 13),
      consume(Op::op_delete_aligned_nothrow, 14, 0, 32),
      consume(Op::op_delete_array_aligned_nothrow, 15, 0, 64),
      consume(Op::free, 16),
      consume(Op::free, 17),
      consume(Op::free, 0),
  };
  Plan plan(evs);
  ASSERT_EQ(plan.dense[0].size(), want.size());
  ThreadResult r;
  plan.run(r, 0, Touch::all);

  ASSERT_EQ(log().size(), want.size());
  std::map<uint64_t, void*> ptr_of;  // object id -> the pointer its call returned
  uint64_t next_id = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i) + " " + std::string(trace::op_name(want[i].op)));
    const Call& c = log()[i];
    EXPECT_EQ(c.op, want[i].op);
    EXPECT_EQ(c.ptr, want[i].old_id ? ptr_of.at(want[i].old_id) : nullptr);
    EXPECT_EQ(c.a, want[i].a);
    EXPECT_EQ(c.b, want[i].b);
    if (trace::op_produces(want[i].op)) {
      ASSERT_NE(c.ret, nullptr);
      // (Unless a later object took its slot.)
      EXPECT_TRUE(plan.slot(next_id) == reinterpret_cast<uintptr_t>(c.ret) || plan.slot(next_id) == Plan::kOverwritten);
      ptr_of[next_id++] = c.ret;
    }
  }
  EXPECT_EQ(next_id, 18u);

  std::array<uint64_t, trace::kOpCount> calls{};
  for (const Want& w : want) ++calls[idx(w.op)];
  EXPECT_EQ(calls[idx(Op::free)], 4u);
  EXPECT_EQ(r.calls, calls);
  EXPECT_EQ(r.nulls, (std::array<uint64_t, trace::kOpCount>{}));
  EXPECT_EQ(r.unexpected, (std::array<uint64_t, trace::kOpCount>{}));
  EXPECT_EQ(r.moved_failed_reallocs, 0u);
  EXPECT_EQ(r.waits, 0u);
  EXPECT_EQ(r.wait_ns, 0u);
  EXPECT_EQ(r.progress.load(), plan.mapped->step_count(0));
}

// ------------------------------------------------------------ NULL results

// An allocation the trace recorded as successful returns NULL here: no
// crash, it is counted in nulls, and the later free of that object gets NULL.
TEST_F(Engine, NullFromBackendIsCountedAndFreedAsNull) {
  Recording::null_size = 777;
  std::vector<Event> evs = {
      alloc(777),                         // id 1: NULL in the replay
      alloc(8),                           // id 2
      with(ev(Op::calloc), 777, 0, 1),    // id 3: calloc(1, 777), NULL too
      with(consume(Op::realloc, 1), 16),  // id 4: realloc(NULL, 16)
      release(2),
      release(3),
      release(4),
  };
  Plan plan(evs);
  ThreadResult r;
  plan.run(r, 0, Touch::all);
  ASSERT_EQ(log().size(), 7u);
  EXPECT_EQ(log()[0].ret, nullptr);
  EXPECT_EQ(log()[3].op, Op::realloc);
  EXPECT_EQ(log()[3].ptr, nullptr);  // the object is NULL here
  EXPECT_EQ(log()[4].ptr, log()[1].ret);
  EXPECT_EQ(log()[5].op, Op::free);
  EXPECT_EQ(log()[5].ptr, nullptr);
  EXPECT_EQ(log()[6].ptr, log()[3].ret);
  EXPECT_EQ(plan.slot(1), kNullObject);
  EXPECT_EQ(plan.slot(3), kNullObject);

  EXPECT_EQ(r.nulls[idx(Op::malloc)], 1u);
  EXPECT_EQ(r.nulls[idx(Op::calloc)], 1u);
  EXPECT_EQ(r.nulls[idx(Op::realloc)], 0u);
  EXPECT_EQ(r.calls[idx(Op::malloc)], 2u);
  EXPECT_EQ(r.calls[idx(Op::calloc)], 1u);
  EXPECT_EQ(r.calls[idx(Op::realloc)], 1u);
  EXPECT_EQ(r.calls[idx(Op::free)], 3u);
  EXPECT_EQ(r.unexpected, (std::array<uint64_t, trace::kOpCount>{}));
}

// A throwing operator new (std::bad_alloc) is recorded as a NULL result, for
// each throwing form; the deletes of those objects get NULL.
TEST_F(Engine, ThrowingOperatorNewIsANullResult) {
  Recording::null_size = 999;
  std::vector<Event> evs = {
      with(ev(Op::op_new), 999),                    // id 1
      with(ev(Op::op_new_array), 999),              // id 2
      with(ev(Op::op_new_aligned), 999, 64),        // id 3
      with(ev(Op::op_new_array_aligned), 999, 64),  // id 4
      with(ev(Op::op_new), 10),                     // id 5
      consume(Op::op_delete, 1),
      consume(Op::op_delete_array, 2),
      consume(Op::op_delete_aligned, 3, 0, 64),
      consume(Op::op_delete_array_aligned, 4, 0, 64),
      consume(Op::op_delete, 5),
  };
  Plan plan(evs);
  ThreadResult r;
  EXPECT_NO_THROW(plan.run(r));
  ASSERT_EQ(log().size(), 10u);
  for (int i = 5; i < 9; ++i) EXPECT_EQ(log()[i].ptr, nullptr) << i;
  EXPECT_EQ(log()[9].ptr, log()[4].ret);
  for (Op op : {Op::op_new_array, Op::op_new_aligned, Op::op_new_array_aligned}) {
    EXPECT_EQ(r.nulls[idx(op)], 1u) << trace::op_name(op);
    EXPECT_EQ(r.calls[idx(op)], 1u) << trace::op_name(op);
  }
  EXPECT_EQ(r.nulls[idx(Op::op_new)], 1u);
  EXPECT_EQ(r.calls[idx(Op::op_new)], 2u);
  EXPECT_EQ(r.progress.load(), plan.mapped->step_count(0));  // 10 calls, the aligned news after a kStepExt
  EXPECT_EQ(r.progress.load(), 14u);
}

// ------------------------------------------------------------ failed reallocs

// A realloc the trace recorded as failed (its object stayed) gives the object
// a new replay id (the plan's). If the call succeeds here, the object now
// lives at the new pointer, stored in the new id's slot, which its later
// free gets, while the old id's slot keeps the original pointer. If it fails
// here too, the new id's slot gets the old pointer, which the free gets. A
// failed realloc(NULL, n) that succeeds here is an unexpected result. None
// of them is a NULL result.
TEST_F(Engine, FailedReallocThatSucceedsMovesTheObject) {
  Recording::null_size = 5000;
  std::vector<Event> evs = {
      alloc(8),                                                // trace 1 -> replay 1
      failed(with(consume(Op::realloc, 1), 64)),               // replay 2 (old 1): moves here
      alloc(9),                                                // trace 2 -> replay 3
      failed(with(consume(Op::reallocarray, 2), 100, 0, 50)),  // replay 4 (old 3):
                                                               // 5000 bytes, fails here too
      failed(with(consume(Op::realloc, 0), 32)),               // realloc(NULL, 32): no id
      release(1),                                              // frees replay 2
      release(2),                                              // frees replay 4
  };
  Plan plan(evs);
  EXPECT_EQ(plan.summary.objects, 2u);
  ASSERT_EQ(plan.mapped->max_id(), 4u);
  ASSERT_EQ(plan.dense[0].size(), 7u);
  const Step* st = plan.dense[0].data();
  EXPECT_EQ(st[0].id(), 1u);
  EXPECT_EQ(st[1].id(), 2u);
  EXPECT_EQ(st[1].old, 1u);
  EXPECT_EQ(st[1].flags(), kFailedFlags);
  EXPECT_EQ(st[2].id(), 3u);
  EXPECT_EQ(st[3].id(), 4u);
  EXPECT_EQ(st[3].old, 3u);
  EXPECT_EQ(st[3].flags(), kFailedFlags);
  EXPECT_EQ(st[4].id(), 0u);
  EXPECT_EQ(st[4].old, 0u);
  EXPECT_EQ(st[5].old, 2u);
  EXPECT_EQ(st[6].old, 4u);

  ThreadResult r;
  plan.run(r, 0, Touch::pages);
  ASSERT_EQ(log().size(), 7u);
  const void* first = log()[0].ret;
  const void* moved = log()[1].ret;
  ASSERT_NE(first, nullptr);
  ASSERT_NE(moved, nullptr);
  ASSERT_NE(moved, first);
  EXPECT_EQ(log()[1].ptr, first);
  EXPECT_EQ(log()[3].op, Op::reallocarray);
  EXPECT_EQ(log()[3].ret, nullptr);
  EXPECT_EQ(log()[3].ptr, log()[2].ret);
  EXPECT_EQ(log()[4].ptr, nullptr);
  EXPECT_NE(log()[4].ret, nullptr);
  EXPECT_EQ(log()[5].ptr, moved);         // the free of object 1 gets the new pointer
  EXPECT_EQ(log()[6].ptr, log()[2].ret);  // object 2 did not move
  // The old id: untouched, unless a later object took its slot.
  EXPECT_TRUE(plan.slot(1) == reinterpret_cast<uintptr_t>(first) || plan.slot(1) == Plan::kOverwritten);
  EXPECT_EQ(plan.slot(2), reinterpret_cast<uintptr_t>(moved));  // the new id: moved
  EXPECT_EQ(plan.slot(3), reinterpret_cast<uintptr_t>(log()[2].ret));
  EXPECT_EQ(plan.slot(4), reinterpret_cast<uintptr_t>(log()[2].ret));  // failed: old pointer

  EXPECT_EQ(r.moved_failed_reallocs, 1u);
  EXPECT_EQ(r.calls[idx(Op::realloc)], 2u);
  EXPECT_EQ(r.calls[idx(Op::reallocarray)], 1u);
  EXPECT_EQ(r.unexpected[idx(Op::realloc)], 1u);
  EXPECT_EQ(r.unexpected[idx(Op::reallocarray)], 0u);
  EXPECT_EQ(r.nulls, (std::array<uint64_t, trace::kOpCount>{}));
}

// A failed-in-the-trace realloc of an object that is NULL here (its
// allocation returned NULL in the replay) is realloc(NULL, n): if that
// fails too, the new id's slot is the NULL object and the free gets NULL;
// if it succeeds, the object is the new block (a moved failed realloc, not
// an unexpected result). Only the two mallocs count as NULL results.
TEST_F(Engine, FailedReallocOfAnObjectThatIsNullHere) {
  Recording::null_size = 5000;
  std::vector<Event> evs = {
      alloc(5000),                                  // trace 1 -> replay 1: NULL here
      failed(with(consume(Op::realloc, 1), 5000)),  // replay 2 (old 1): NULL here too
      alloc(5000),                                  // trace 2 -> replay 3: NULL here
      failed(with(consume(Op::realloc, 2), 64)),    // replay 4 (old 3): succeeds here
      release(1),                                   // frees replay 2
      release(2),                                   // frees replay 4
  };
  Plan plan(evs);
  ASSERT_EQ(plan.mapped->max_id(), 4u);
  const Step* st = plan.dense[0].data();
  ASSERT_EQ(plan.dense[0].size(), 6u);
  EXPECT_EQ(st[1].id(), 2u);
  EXPECT_EQ(st[1].old, 1u);
  EXPECT_EQ(st[3].id(), 4u);
  EXPECT_EQ(st[3].old, 3u);
  EXPECT_EQ(st[4].old, 2u);
  EXPECT_EQ(st[5].old, 4u);

  ThreadResult r;
  plan.run(r, 0, Touch::pages);
  ASSERT_EQ(log().size(), 6u);
  EXPECT_EQ(log()[0].ret, nullptr);
  EXPECT_EQ(log()[1].ptr, nullptr);
  EXPECT_EQ(log()[1].ret, nullptr);
  EXPECT_EQ(log()[3].ptr, nullptr);
  ASSERT_NE(log()[3].ret, nullptr);
  EXPECT_EQ(log()[4].ptr, nullptr);
  EXPECT_EQ(log()[5].ptr, log()[3].ret);
  // (A slot a later object took says kOverwritten.)
  for (uint64_t id : {1, 2, 3}) EXPECT_TRUE(plan.slot(id) == kNullObject || plan.slot(id) == Plan::kOverwritten) << id;
  EXPECT_EQ(plan.slot(2), kNullObject);  // the kept object: NULL here
  EXPECT_EQ(plan.slot(4), reinterpret_cast<uintptr_t>(log()[3].ret));

  EXPECT_EQ(r.moved_failed_reallocs, 1u);
  std::array<uint64_t, trace::kOpCount> nulls{};
  nulls[idx(Op::malloc)] = 2;
  EXPECT_EQ(r.nulls, nulls);
  EXPECT_EQ(r.unexpected, (std::array<uint64_t, trace::kOpCount>{}));
}

// Across threads: thread 0 allocates an object and then reallocs it, a call
// that failed in the trace but succeeds here, slowly (the backend sleeps 5
// ms between allocating the new block and freeing the old one); thread 1
// frees the object later in trace order. Thread 1 starts once thread 0 is
// inside that realloc, so it has to wait for the move: its free gets the
// moved pointer, never the original one (which the realloc frees). The
// backend's entry counter orders nothing the test checks: the new block is
// allocated after it, and reaches thread 1 through the engine's slot alone.
TEST_F(Engine, CrossThreadFreeWaitsForAFailedReallocThatMoves) {
  std::vector<Event> evs = {
      alloc(24, 0),                                 // thread 0: replay 1
      failed(with(consume(Op::realloc, 1), 4000)),  // thread 0: replay 2 (old 1)
      release(1, 1),                                // thread 1: frees replay 2
  };
  Plan plan(evs);
  ASSERT_EQ(plan.mapped->threads(), 2u);
  ASSERT_EQ(plan.mapped->max_id(), 2u);
  ASSERT_EQ(plan.dense[0].size(), 2u);
  ASSERT_EQ(plan.dense[1].size(), 1u);
  EXPECT_EQ(plan.dense[0][1].id(), 2u);
  EXPECT_EQ(plan.dense[0][1].old, 1u);
  EXPECT_EQ(plan.dense[1][0].old, 2u);
  EXPECT_EQ(plan.summary.cross_thread_consumes, 1u);

  uint64_t waits = 0;
  for (int iter = 0; iter < 40; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    Recording::reset();
    Recording::realloc_sleep_ms = 5;
    plan.reset_table();
    std::array<ThreadResult, 2> r;
    RunParams prm;
    prm.table = plan.table.get();
    prm.peers = r.data();
    prm.touch = Touch::pages;
    {
      std::thread a([&] {
        Recording::lane = 0;
        run_steps<Recording>(plan.begin(0), plan.end(0), prm, r[0]);
      });
      std::thread b([&] {
        Recording::lane = 1;
        while (Recording::reallocs_entered.load(std::memory_order_acquire) == 0) std::this_thread::yield();
        run_steps<Recording>(plan.begin(1), plan.end(1), prm, r[1]);
      });
      a.join();
      b.join();
    }
    ASSERT_EQ(log(0).size(), 2u);
    ASSERT_EQ(log(1).size(), 1u);
    const void* original = log(0)[0].ret;
    const void* moved = log(0)[1].ret;
    ASSERT_NE(original, nullptr);
    ASSERT_NE(moved, nullptr);
    ASSERT_NE(moved, original);
    EXPECT_EQ(log(0)[1].op, Op::realloc);
    EXPECT_EQ(log(0)[1].ptr, original);
    EXPECT_EQ(log(1)[0].op, Op::free);
    EXPECT_NE(log(1)[0].ptr, original);
    EXPECT_EQ(log(1)[0].ptr, moved);
    EXPECT_GE(log(1)[0].at, log(0)[1].at);  // after the realloc returned
    EXPECT_EQ(plan.slot(1), reinterpret_cast<uintptr_t>(original));
    EXPECT_EQ(plan.slot(2), reinterpret_cast<uintptr_t>(moved));
    EXPECT_EQ(r[0].moved_failed_reallocs, 1u);
    EXPECT_EQ(r[0].waits, 0u);
    EXPECT_LE(r[1].waits, 1u);
    EXPECT_EQ(r[0].nulls, (std::array<uint64_t, trace::kOpCount>{}));
    EXPECT_EQ(r[0].unexpected, (std::array<uint64_t, trace::kOpCount>{}));
    EXPECT_EQ(r[1].progress.load(), 1u);
    waits += r[1].waits;
  }
  // Thread 1 starts while thread 0 sleeps 5 ms in the realloc, so it reaches
  // its free before the move ends and waits: at least once in 40 runs.
  EXPECT_GT(waits, 0u);
  RecordProperty("waits", std::to_string(waits));
}

// ------------------------------------------------------------ touch modes

// Byte offsets into the arena that are not zero, with their values.
std::map<size_t, unsigned> written() {
  std::map<size_t, unsigned> w;
  for (size_t i = 0; i < sizeof Arena::mem; ++i)
    if (Arena::mem[i]) w[i] = Arena::mem[i];
  return w;
}

// How the engine writes a new block: none not at all, first its first byte,
// pages one byte every 4096 and the last one, all every byte with 0x5a (for
// calloc, count * size bytes); nothing beyond the requested size.
TEST_F(Engine, TouchModes) {
  const uint64_t big = 3 * 4096 + 100;  // 12388 bytes: 4 pages' worth of offsets
  std::vector<Event> evs = {
      alloc(big),                        // block 0
      with(ev(Op::calloc), 1000, 0, 3),  // block 1: 3000 bytes
      alloc(1),                          // block 2
  };
  Plan plan(evs);
  constexpr size_t B = Arena::kBlock;

  // (recorded: blocks without a recorded count are touched as with pages)
  for (Touch t : {Touch::none, Touch::first, Touch::pages, Touch::all, Touch::recorded}) {
    SCOPED_TRACE(int(t));
    Arena::reset();
    plan.reset_table();
    ThreadResult r;
    plan.run<Arena>(r, 0, t);
    ASSERT_EQ(r.nulls, (std::array<uint64_t, trace::kOpCount>{}));
    ASSERT_EQ(log().size(), 3u);
    ASSERT_EQ(log()[2].ret, Arena::mem + 2 * B);
    std::map<size_t, unsigned> want;
    switch (t) {
      case Touch::none:
        break;
      case Touch::first:
        want = {{0, 1}, {B, 1}, {2 * B, 1}};
        break;
      case Touch::pages:
      case Touch::recorded:
        want = {{0, 1}, {4096, 1}, {8192, 1}, {12288, 1}, {big - 1, 1}, {B, 1}, {B + 2999, 1}, {2 * B, 1}};
        break;
      case Touch::all:
        for (size_t i = 0; i < big; ++i) want[i] = 0x5a;
        for (size_t i = 0; i < 3000; ++i) want[B + i] = 0x5a;
        want[2 * B] = 0x5a;
        break;
    }
    EXPECT_EQ(written(), want);
  }
}

// ------------------------------------------------------------ cross-thread

// A producer/consumer trace on two threads: each frees what the other
// allocated right after it was allocated (and sometimes reallocs it first).
std::vector<Event> ping_pong(int rounds) {
  std::vector<Event> evs;
  uint64_t id = 0;
  for (int i = 0; i < rounds; ++i) {
    evs.push_back(alloc(16 + i, 0));  // a: thread 0
    const uint64_t a = ++id;
    if (i % 5 == 0) {
      evs.push_back(with(consume(Op::realloc, a), 64 + i));  // thread 1 moves it
      evs.back().thread = 1;
      const uint64_t c = ++id;
      evs.push_back(release(c, 0));  // and thread 0 frees it
    } else {
      evs.push_back(release(a, 1));
    }
    evs.push_back(with(ev(Op::calloc, 1), 8, 0, 2 + i % 3));  // b: thread 1
    const uint64_t b = ++id;
    evs.push_back(release(b, 0, 0, Op::op_delete));
  }
  return evs;
}

// Two replay threads sharing one slot table, many times over: both finish,
// every consume gets exactly the pointer its producer returned, and the wait
// counts are bounded by the consumes of the other thread's objects. The
// backend has no locks, so TSan checks the engine's own handoff.
void expect_every_consume_gets_its_pointer(std::vector<Event> evs, int iterations, uint64_t& handoffs);

TEST_F(Engine, CrossThreadConsumesGetTheProducersPointer) {
  uint64_t handoffs = 0;
  expect_every_consume_gets_its_pointer(ping_pong(40), 200, handoffs);
  EXPECT_EQ(handoffs, 0u);
}

// Thread 0 makes 5,000 objects that thread 1 frees 50 objects later: thread
// 1's freed slots reach thread 0 in batches, after handoff steps that wait
// for thread 1 to have freed them.
TEST_F(Engine, SlotsHandedBetweenThreadsAreFreeWhenReused) {
  std::vector<Event> evs;
  for (uint64_t i = 1; i <= 5050; ++i) {
    if (i <= 5000) evs.push_back(alloc(16 + i % 64, 0));
    if (i > 50) evs.push_back(release(i - 50, 1));
  }
  uint64_t handoffs = 0;
  expect_every_consume_gets_its_pointer(evs, 20, handoffs);
  EXPECT_EQ(handoffs, 20u * 3u);  // a batch of 1,024 at 2,048, 3,072 and 4,096 of thread 1's frees
}

void expect_every_consume_gets_its_pointer(std::vector<Event> evs, int iterations, uint64_t& handoffs) {
  Plan plan(evs);
  ASSERT_EQ(plan.mapped->threads(), 2u);
  ASSERT_GT(plan.summary.cross_thread_consumes, 0u);

  // For each thread: its steps, and how many of them consume the other's objects.
  std::vector<uint32_t> producer(plan.mapped->max_id() + 1, 0);
  for (uint32_t t = 0; t < 2; ++t)
    for (const Step& s : plan.dense[t])
      if (s.id()) producer[s.id()] = t;
  std::array<uint64_t, 2> foreign{};
  for (uint32_t t = 0; t < 2; ++t)
    for (const Step& s : plan.dense[t])
      if (s.old && producer[s.old] != t) ++foreign[t];
  EXPECT_EQ(foreign[0] + foreign[1], plan.summary.cross_thread_consumes);

  uint64_t total_waits = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    Recording::reset();
    plan.reset_table();
    std::array<ThreadResult, 2> r;
    RunParams prm;
    prm.table = plan.table.get();
    prm.peers = r.data();
    prm.touch = Touch::pages;
    {
      std::vector<std::thread> threads;
      for (uint32_t t = 0; t < 2; ++t)
        threads.emplace_back([&, t] {
          Recording::lane = int(t);
          run_steps<Recording>(plan.begin(t), plan.end(t), prm, r[t]);
        });
      for (auto& th : threads) th.join();
    }
    std::map<uint64_t, void*> ret_of;
    for (uint32_t t = 0; t < 2; ++t) {
      ASSERT_EQ(Recording::logs[t].size(), plan.dense[t].size());
      for (size_t i = 0; i < Recording::logs[t].size(); ++i)
        if (const uint64_t id = plan.dense[t][i].id()) {
          ASSERT_NE(Recording::logs[t][i].ret, nullptr);
          ret_of[id] = Recording::logs[t][i].ret;
        }
    }
    for (uint32_t t = 0; t < 2; ++t) {
      for (size_t i = 0; i < Recording::logs[t].size(); ++i) {
        if (const uint64_t old = plan.dense[t][i].old) {
          ASSERT_EQ(Recording::logs[t][i].ptr, ret_of.at(old)) << "thread " << t << " step " << i;
        }
      }
      EXPECT_LE(r[t].waits, foreign[t]);
      if (r[t].waits == 0) {
        EXPECT_EQ(r[t].wait_ns, 0u);
      }
      EXPECT_EQ(r[t].progress.load(), plan.mapped->step_count(t));
      EXPECT_EQ(r[t].nulls, (std::array<uint64_t, trace::kOpCount>{}));
      total_waits += r[t].waits;
      handoffs += r[t].handoffs;
    }
  }
  // Not asserted (it depends on scheduling), but shown: how often a consumer
  // actually had to wait for its producer.
  ::testing::Test::RecordProperty("total_waits", std::to_string(total_waits));
}

// ------------------------------------------------------------ paced replay

// Paced replay: step i does not start before start + time[i] / speed. At
// speed 1 steps recorded at 0, 5 and 10 ms take at least 10 ms; at speed 10
// at least 1 ms (the upper bound is left to the scheduler).
TEST_F(Engine, PacedReplayFollowsRecordedTimes) {
  constexpr uint64_t ms = 1000000;
  std::vector<Event> evs = {alloc(8, 0, 0), alloc(16, 0, 5 * ms), release(1, 0, 10 * ms)};
  Plan plan(evs, /*timestamps=*/true);
  ASSERT_TRUE(plan.mapped->has_times());
  const uint64_t* times = plan.mapped->times(0);
  ASSERT_EQ(std::vector<uint64_t>(times, times + 3), (std::vector<uint64_t>{0, 5 * ms, 10 * ms}));

  for (double speed : {1.0, 10.0}) {
    SCOPED_TRACE(speed);
    Recording::reset();
    plan.reset_table();
    RunParams prm;
    prm.table = plan.table.get();
    prm.touch = Touch::none;
    prm.times = times;
    prm.speed = speed;
    prm.start_ns = monotonic_ns();
    ThreadResult r;
    run_steps<Recording, true>(plan.begin(0), plan.end(0), prm, r);
    const uint64_t elapsed = monotonic_ns() - prm.start_ns;
    ASSERT_EQ(log().size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_GE(log()[i].at - prm.start_ns, uint64_t(double(times[i]) / speed)) << "step " << i;
    EXPECT_EQ(log()[2].ptr, log()[0].ret);
    if (speed == 1.0)
      EXPECT_GE(elapsed, 10 * ms);
    else
      EXPECT_GE(elapsed, 1 * ms);
    free_leftovers();  // object 2 is never freed
    Recording::reset();
  }
}

// A call that needs a kStepExt (plan.h: realloc's old object, calloc's
// count, an alignment) has it as the step before: where the replayer runs
// a thread's steps in several calls (a window of the plan at a time), one
// may end between the two. Run in two calls split at every step, the
// backend gets the same calls as in one.
TEST_F(Engine, AKStepExtSplitFromItsStepKeepsItsFields) {
  std::vector<Event> evs = {
      alloc(8),                                      // 1
      with(consume(Op::realloc, 1), 64),             // 2 (old 1)
      with(ev(Op::calloc), 16, 0, 3),                // 3
      with(ev(Op::aligned_alloc), 100, 64),          // 4
      with(consume(Op::reallocarray, 3), 10, 0, 7),  // 5 (old 3)
      consume(Op::op_delete_aligned, 4, 0, 64),      //
      consume(Op::free, 2),                          //
      consume(Op::free, 5),                          //
  };
  Plan plan(evs);
  const uint64_t n = plan.mapped->step_count(0);
  ASSERT_EQ(n, 13u);  // 8 calls; all but the malloc and the frees after a kStepExt
  ThreadResult one;
  plan.run(one);
  const std::vector<Call> whole = log();
  ASSERT_EQ(whole.size(), 8u);
  EXPECT_EQ(whole[1].ptr, whole[0].ret);  // realloc(p, 64)
  EXPECT_EQ(whole[2].a, 3u);              // calloc(3, 16)
  EXPECT_EQ(whole[3].a, 64u);             // aligned_alloc(64, 100)
  EXPECT_EQ(whole[4].ptr, whole[2].ret);  // reallocarray(q, 7, 10)
  EXPECT_EQ(whole[4].a, 7u);
  EXPECT_EQ(whole[5].ptr, whole[3].ret);  // delete(r, align 64)
  EXPECT_EQ(whole[5].a, 64u);
  free_leftovers();
  for (uint64_t split = 1; split < n; ++split) {
    SCOPED_TRACE("split at step " + std::to_string(split));
    Recording::reset();
    plan.reset_table();
    ThreadResult r;
    RunParams prm;
    prm.table = plan.table.get();
    prm.touch = Touch::none;
    prm.origin = plan.begin(0);
    run_steps<Recording>(plan.begin(0), plan.begin(0) + split, prm, r);
    run_steps<Recording>(plan.begin(0) + split, plan.end(0), prm, r);
    EXPECT_EQ(r.progress.load(), n);
    const std::vector<Call>& got = log();
    ASSERT_EQ(got.size(), whole.size());
    std::map<const void*, size_t> made;  // pointer -> the call that returned it
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].op, whole[i].op) << i;
      EXPECT_EQ(got[i].a, whole[i].a) << i;
      EXPECT_EQ(got[i].b, whole[i].b) << i;
      // A consumer gets what the same call as in one run returned.
      if (whole[i].ptr) {
        ASSERT_TRUE(made.count(got[i].ptr)) << i;
        size_t j = 0;
        while (whole[j].ret != whole[i].ptr) ++j;
        EXPECT_EQ(made[got[i].ptr], j) << i;
      }
      if (got[i].ret) made[got[i].ret] = i;
    }
    free_leftovers();
  }
}

// --latency N times every Nth call of a thread, counted in calls (not in
// steps, which include kStepExt steps), however its steps are split into
// runs (a window of the plan at a time): 10 calls, every 3rd timed, in two
// runs split at every step, time calls 0, 3, 6 and 9.
TEST_F(Engine, LatencySamplesEveryNthCallAcrossRuns) {
  std::vector<Event> evs;
  for (int i = 0; i < 5; ++i) evs.push_back(with(ev(Op::calloc), 16, 0, 2));
  for (uint64_t id = 1; id <= 5; ++id) evs.push_back(consume(Op::free, id));
  Plan plan(evs);
  const uint64_t n = plan.mapped->step_count(0);
  ASSERT_EQ(n, 15u);  // each calloc after a kStepExt
  for (uint64_t split = 1; split < n; ++split) {
    SCOPED_TRACE("split at step " + std::to_string(split));
    Recording::reset();
    plan.reset_table();
    std::array<LogLinearHistogram, trace::kOpCount> latency{};
    ThreadResult r;
    RunParams prm;
    prm.table = plan.table.get();
    prm.touch = Touch::none;
    prm.origin = plan.begin(0);
    prm.latency = latency.data();
    prm.sample_every = 3;
    run_steps<Recording, false, true>(plan.begin(0), plan.begin(0) + split, prm, r);
    run_steps<Recording, false, true>(plan.begin(0) + split, plan.end(0), prm, r);
    EXPECT_EQ(latency[idx(Op::calloc)].count(), 2u);  // calls 0 and 3
    EXPECT_EQ(latency[idx(Op::free)].count(), 2u);    // calls 6 and 9
  }
}

// A recorded thread that started after another had ended runs after it on
// the same replay thread, behind a kStepNewThread: run_steps stops after it
// (the caller goes on on a new thread) and the steps after it go on from
// there, counted as one thread's.
TEST_F(Engine, ANewThreadStepStopsTheRun) {
  std::vector<Event> evs = {ev(Op::thread_start, 0), with(ev(Op::malloc, 0), 24), consume(Op::free, 1),
                            ev(Op::thread_end, 0),   ev(Op::thread_start, 1),     with(ev(Op::malloc, 1), 40),
                            consume(Op::free, 2),    ev(Op::thread_end, 1)};
  evs[6].thread = 1;
  Plan plan(evs, false, true);
  ASSERT_EQ(plan.mapped->threads(), 1u);
  ASSERT_EQ(plan.mapped->step_count(0), 5u);
  ASSERT_EQ(plan.begin(0)[2].op(), unsigned(heaplab::replay::kStepNewThread));
  ThreadResult r;
  RunParams prm;
  prm.table = plan.table.get();
  prm.origin = plan.begin(0);
  run_steps<Recording>(plan.begin(0), plan.end(0), prm, r);
  EXPECT_TRUE(r.new_thread);
  EXPECT_EQ(r.progress.load(), 3u);
  ASSERT_EQ(log().size(), 2u);
  EXPECT_EQ(r.calls[idx(Op::malloc)], 1u);
  EXPECT_EQ(r.calls[idx(Op::free)], 1u);
  r.new_thread = false;
  run_steps<Recording>(plan.begin(0) + 3, plan.end(0), prm, r);
  EXPECT_FALSE(r.new_thread);
  EXPECT_EQ(r.progress.load(), 5u);
  ASSERT_EQ(log().size(), 4u);
  EXPECT_EQ(log()[2].a, 40u);
  EXPECT_EQ(r.calls[idx(Op::malloc)], 2u);
  EXPECT_EQ(r.calls[idx(Op::free)], 2u);
}

// The recording backend has the rest of a backend's interface.
TEST_F(Engine, RecordingBackendDescribesItself) {
  EXPECT_STREQ(Recording::kName, "recording");
  EXPECT_EQ(Recording::describe()["version"], "test");
  EXPECT_TRUE(Recording::stats().is_object());
}

}  // namespace
}  // namespace heaplab::replay
