// The replay engine on a real allocator, in this test process: compiled
// once per backend (replay/CMakeLists.txt) with HEAPLAB_BACKEND_HEADER,
// HEAPLAB_BACKEND and HEAPLAB_BACKEND_SUITE, and linked with the allocator
// itself, as its replayer is. Every call of the trace format reaches the
// allocator with valid arguments and succeeds, aligned calls get aligned
// blocks, objects freed by another thread reach it, and the backend
// describes the library that really answered.
#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdint>
#include <gtest/gtest.h>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"
#include "replay/engine.h"
#include "replay/plan.h"
#include HEAPLAB_BACKEND_HEADER

namespace heaplab::replay {
namespace {

using B = HEAPLAB_BACKEND;
static_assert(allocators::Backend<B>);

using trace::Event;
using trace::Op;
using trace::testutil::ev;
using trace::testutil::TempDir;

constexpr unsigned idx(Op op) { return static_cast<unsigned>(op); }

Event alloc(Op op, uint64_t size, uint64_t align = 0, uint64_t count = 0, uint32_t thread = 0) {
  Event e = ev(op, thread);
  e.size = size;
  e.align = align;
  e.count = count;
  return e;
}
Event consume(Op op, uint64_t old, uint64_t size = 0, uint64_t align = 0, uint32_t thread = 0) {
  Event e = ev(op, thread);
  e.old = old;
  e.size = size;
  e.align = align;
  return e;
}

// A plan of `events` (the writer numbers the objects), mapped, with its
// object table; run() replays one of its threads on the calling thread.
struct Plan {
  PlanSummary summary;
  int fd = -1;
  std::unique_ptr<MappedPlan> mapped;
  std::unique_ptr<Slot[]> table;

  explicit Plan(std::vector<Event>& events) {
    TempDir dir;
    trace::testutil::write_trace(dir.file("t.hlt"), events, trace::WriterOptions{});
    auto r = trace::TraceReader::open(dir.file("t.hlt"));
    PlanOptions opt;
    opt.reuse_slots = false;  // the test reads every object's pointer after the run
    fd = build_plan(*r, opt, summary);
    mapped = std::make_unique<MappedPlan>(fd);
    table.reset(new Slot[mapped->slots() + 1]());
    table[0].store(kNullObject);
  }
  ~Plan() {
    mapped.reset();
    if (fd >= 0) close(fd);
  }
  void run(ThreadResult& r, uint32_t t, Touch touch) {
    RunParams prm;
    prm.table = table.get();
    prm.touch = touch;
    run_steps<B>(mapped->steps(t), mapped->steps(t) + mapped->step_count(t), prm, r);
  }
  // Object `id`'s pointer (each object has its own slot, generation 1).
  uintptr_t slot(uint64_t id) const { return table[id].load() & kPointerMask; }
};

class HEAPLAB_BACKEND_SUITE : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { B::init(); }
};

// Every op of the format, each allocation released by the call that
// matches how it was made (sized deletes with the size asked for, aligned
// deletes with the alignment), as a correct program would.
TEST_F(HEAPLAB_BACKEND_SUITE, EveryCallSucceedsOnTheRealAllocator) {
  std::vector<Event> evs = {
      alloc(Op::malloc, 11),        // 1
      alloc(Op::calloc, 12, 0, 3),  // 2
      consume(Op::free, 1),
      consume(Op::realloc, 2, 100),           // 3
      consume(Op::reallocarray, 3, 1000, 0),  // 4 (count below)
      consume(Op::free, 4),
      alloc(Op::memalign, 15, 64),         // 5
      alloc(Op::posix_memalign, 16, 128),  // 6
      alloc(Op::aligned_alloc, 512, 256),  // 7
      alloc(Op::valloc, 18),               // 8
      alloc(Op::pvalloc, 19),              // 9
      consume(Op::free, 5),
      consume(Op::free, 6),
      consume(Op::free, 7),
      consume(Op::free, 8),
      consume(Op::free, 9),
      alloc(Op::op_new, 20),                // 10
      alloc(Op::op_new, 20),                // 11
      alloc(Op::op_new_array, 21),          // 12
      alloc(Op::op_new_array, 21),          // 13
      alloc(Op::op_new_nothrow, 22),        // 14
      alloc(Op::op_new_array_nothrow, 23),  // 15
      consume(Op::op_delete, 10),
      consume(Op::op_delete_sized, 11, 20),
      consume(Op::op_delete_array, 12),
      consume(Op::op_delete_array_sized, 13, 21),
      consume(Op::op_delete_nothrow, 14),
      consume(Op::op_delete_array_nothrow, 15),
      alloc(Op::op_new_aligned, 24, 32),                 // 16
      alloc(Op::op_new_aligned, 40, 64),                 // 17
      alloc(Op::op_new_array_aligned, 25, 64),           // 18
      alloc(Op::op_new_array_aligned, 25, 64),           // 19
      alloc(Op::op_new_aligned_nothrow, 26, 128),        // 20
      alloc(Op::op_new_array_aligned_nothrow, 27, 256),  // 21
      alloc(Op::op_new_aligned, 5000, 4096),             // 22
      consume(Op::op_delete_aligned, 16, 0, 32),
      consume(Op::op_delete_sized_aligned, 17, 40, 64),
      consume(Op::op_delete_array_aligned, 18, 0, 64),
      consume(Op::op_delete_array_sized_aligned, 19, 25, 64),
      consume(Op::op_delete_aligned_nothrow, 20, 0, 128),
      consume(Op::op_delete_array_aligned_nothrow, 21, 0, 256),
      consume(Op::op_delete_sized_aligned, 22, 5000, 4096),
      alloc(Op::malloc, 3 << 20),         // 23: a large block
      consume(Op::realloc, 23, 9 << 20),  // 24
      consume(Op::free, 24),
      consume(Op::free, 0),  // free(NULL)
  };
  evs[4].count = 2;  // reallocarray(p, 2, 1000)
  Plan plan(evs);
  ASSERT_EQ(std::accumulate(plan.summary.ops.begin(), plan.summary.ops.end(), uint64_t{0}), evs.size());

  ThreadResult r;
  plan.run(r, 0, Touch::all);

  std::array<uint64_t, trace::kOpCount> calls{};
  for (const Event& e : evs) ++calls[idx(e.op)];
  // Every call of the format was made (all ops up to the last delete; the
  // rest are markers, not calls).
  for (unsigned k = 0; k <= idx(Op::op_delete_array_aligned_nothrow); ++k)
    EXPECT_GT(calls[k], 0u) << trace::op_name(Op(k));
  EXPECT_EQ(r.calls, calls);
  EXPECT_EQ(r.nulls, (std::array<uint64_t, trace::kOpCount>{}));
  EXPECT_EQ(r.unexpected, (std::array<uint64_t, trace::kOpCount>{}));
  EXPECT_EQ(r.progress.load(), plan.summary.steps);  // (with the kStepExt steps)

  // The aligned calls returned aligned blocks: {object, size, alignment}.
  // mimalloc 2.0.9 (Debian 12's) has a known bug here (upstream issue 700,
  // fixed in 2.0.10): blocks of 256 to 1024 bytes asked with an alignment of
  // 256 or more come back aligned to 128 only. The engine passes the
  // alignment; the allocator ignores it. Counted and shown, not failed.
  const bool mimalloc_209 =
      std::string(B::kName) == "mimalloc" && B::describe().value("version", "") == "mimalloc 2.0.9";
  struct Aligned {
    uint64_t id, size, align;
  };
  const std::vector<Aligned> aligned = {{5, 15, 64},   {6, 16, 128},  {7, 512, 256}, {8, 18, 4096},
                                        {9, 19, 4096}, {16, 24, 32},  {17, 40, 64},  {18, 25, 64},
                                        {19, 25, 64},  {20, 26, 128}, {21, 27, 256}, {22, 5000, 4096}};
  int known_bug = 0;
  for (const Aligned& a : aligned) {
    ASSERT_NE(plan.slot(a.id), 0u) << "object " << a.id;
    ASSERT_NE(plan.slot(a.id), kNullObject) << "object " << a.id;
    if (plan.slot(a.id) % a.align != 0 && mimalloc_209 && a.align >= 256 && a.align <= 1024 && a.size >= 256 &&
        a.size <= 1024 && plan.slot(a.id) % 128 == 0) {
      ++known_bug;
      continue;
    }
    EXPECT_EQ(plan.slot(a.id) % a.align, 0u) << "object " << a.id << " (" << a.size << " bytes) aligned to " << a.align;
  }
  if (known_bug)
    std::printf("note: %d block(s) misaligned by mimalloc 2.0.9's known bug (upstream issue 700)\n", known_bug);
}

// Two threads, the second freeing (and reallocating) what the first made:
// the engine hands the first thread's pointers over and the allocator takes
// its blocks back from another thread, many times over, sizes from 1 byte
// to 256 KiB.
TEST_F(HEAPLAB_BACKEND_SUITE, CrossThreadFreesReachTheAllocator) {
  std::mt19937_64 rng(7);
  std::vector<Event> evs;
  constexpr uint64_t kObjects = 20000;
  for (uint64_t i = 0; i < kObjects; ++i) {
    const uint64_t size = (rng() % 5 == 0) ? 1 + rng() % (256 << 10) : 1 + rng() % 512;
    evs.push_back(alloc(i % 3 == 0 ? Op::op_new : Op::malloc, size, 0, 0, 0));
  }
  for (uint64_t id = 1; id <= kObjects; ++id) {
    const Op op = (id - 1) % 3 == 0 ? Op::op_delete : Op::free;
    evs.push_back(consume(op, id, 0, 0, 1));
  }
  Plan plan(evs);
  ASSERT_EQ(plan.mapped->threads(), 2u);
  ThreadResult r0, r1;
  std::thread a([&] { plan.run(r0, 0, Touch::pages); });
  std::thread b([&] { plan.run(r1, 1, Touch::pages); });
  a.join();
  b.join();
  EXPECT_EQ(r0.calls[idx(Op::malloc)] + r0.calls[idx(Op::op_new)], kObjects);
  EXPECT_EQ(r1.calls[idx(Op::free)] + r1.calls[idx(Op::op_delete)], kObjects);
  EXPECT_EQ(r0.nulls, (std::array<uint64_t, trace::kOpCount>{}));
  EXPECT_EQ(r1.unexpected, (std::array<uint64_t, trace::kOpCount>{}));
}

// describe() names the library that answered: the allocator linked in (or,
// for the system backend, whatever answers malloc in this process: glibc).
TEST_F(HEAPLAB_BACKEND_SUITE, DescribesTheLibraryThatAnswers) {
  const nlohmann::json d = B::describe();
  ASSERT_TRUE(d.is_object()) << d.dump();
  const std::string name = B::kName;
  const std::string library = d.value("library", "");
  if (name == "system") {
    EXPECT_NE(library.find("libc.so"), std::string::npos) << d.dump();
  } else {
    EXPECT_NE(library.find(name == "tcmalloc" ? "tcmalloc" : name), std::string::npos) << d.dump();
    EXPECT_FALSE(d.value("version", "").empty()) << d.dump();
  }
  EXPECT_TRUE(B::stats().is_object());
}

}  // namespace
}  // namespace heaplab::replay
