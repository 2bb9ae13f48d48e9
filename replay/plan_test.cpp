// Tests of the replay plan builder (build_plan, fold_threads) and of the
// plan's mapped form (MappedPlan): every step field, the summary numbers,
// thread folding, timestamps, and the errors for inconsistent traces and for
// files that are not plans.
#include "replay/plan.h"
#include "replay/plan_store.h"
#include "replay/plan_testutil.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_map>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_format.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"

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

__extension__ typedef unsigned __int128 u128;

constexpr unsigned idx(Op op) { return static_cast<unsigned>(op); }
constexpr uint8_t kFailedFlags = trace::kNullResult | trace::kFailed;

// ------------------------------------------------------------ event builders

Event calloc_ev(uint64_t count, uint64_t size, uint32_t thread = 0) {
  Event e = ev(Op::calloc, thread);
  e.count = count;
  e.size = size;
  return e;
}
Event realloc_ev(uint64_t old, uint64_t size, uint32_t thread = 0) {
  Event e = ev(Op::realloc, thread);
  e.old = old;
  e.size = size;
  return e;
}
Event reallocarray_ev(uint64_t old, uint64_t count, uint64_t size, uint32_t thread = 0) {
  Event e = ev(Op::reallocarray, thread);
  e.old = old;
  e.count = count;
  e.size = size;
  return e;
}
Event aligned_ev(Op op, uint64_t align, uint64_t size, uint32_t thread = 0) {
  Event e = ev(op, thread);
  e.align = align;
  e.size = size;
  return e;
}
Event lost_ev(uint64_t count, uint32_t thread = 0) {
  Event e = ev(Op::lost, thread);
  e.count = count;
  return e;
}
Event failed(Event e) {
  e.flags = kFailedFlags;
  return e;
}
Event at(Event e, uint64_t time) {
  e.time = time;
  return e;
}

// ------------------------------------------------------------ plan helpers

// A built plan: its summary, its memfd and the plan mapped from it, plus the
// trace's events as read back (seq and ids as the writer assigned them).
struct Built {
  PlanSummary summary;
  int fd = -1;
  std::unique_ptr<MappedPlan> plan;
  std::vector<Event> events;
  ~Built() {
    plan.reset();
    if (fd >= 0) close(fd);
  }
};

std::unique_ptr<Built> build_from(const TraceReader& r, const PlanOptions& opt) {
  auto b = std::make_unique<Built>();
  b->events = trace::testutil::read_all(r);
  b->fd = build_plan(r, opt, b->summary);
  b->plan = std::make_unique<MappedPlan>(b->fd);
  return b;
}

// Writes `events` (the writer fills in seq and ids), reads the trace back and
// builds its plan.
std::unique_ptr<Built> build(std::vector<Event>& events, const PlanOptions& opt = {}, bool timestamps = false) {
  TempDir dir;
  WriterOptions wo;
  wo.timestamps = timestamps;
  const std::string path = dir.file("t.hlt");
  trace::testutil::write_trace(path, events, wo);
  auto r = TraceReader::open(path);
  return build_from(*r, opt);
}

// The PlanError message build_plan gives for `events` ("" if none).
std::string plan_error(std::vector<Event>& events) {
  TempDir dir;
  const std::string path = dir.file("t.hlt");
  trace::testutil::write_trace(path, events, WriterOptions{});
  auto r = TraceReader::open(path);
  PlanSummary s;
  try {
    close(build_plan(*r, PlanOptions{}, s));
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

// Replay thread t's steps with dense ids (replay/plan_testutil.h): named in
// the order they run (one thread: of creation), or as `want` names them.
std::vector<Step> steps_of(const MappedPlan& p, uint32_t t) { return testutil::dense_steps(p).at(t); }
std::vector<Step> steps_of(const MappedPlan& p, uint32_t t, const std::vector<std::vector<Step>>& want) {
  return testutil::dense_steps(p, &want).at(t);
}

bool is_call(const Event& e) { return e.op != Op::thread_start && e.op != Op::thread_end && e.op != Op::lost; }

// The step a call becomes when replay ids and trace ids coincide (a complete
// trace without failed reallocs of live objects); see Model for the rest.
Step step_of(const Event& e) {
  Step s{};
  s.head = uint64_t(idx(e.op)) | uint64_t{e.flags} << 8 | e.id << 16;
  s.old = e.old;
  s.size = e.size;
  s.arg = trace::op_has(e.op, trace::kCount) ? e.count : e.align;
  return s;
}

void expect_step(const Step& s, Op op, uint8_t flags, uint64_t id, uint64_t old, uint64_t size, uint64_t arg,
                 size_t i) {
  SCOPED_TRACE("step " + std::to_string(i));
  EXPECT_EQ(s.op(), op);
  EXPECT_EQ(s.flags(), flags);
  EXPECT_EQ(s.id(), id);
  EXPECT_EQ(s.old, old);
  EXPECT_EQ(s.size, size);
  EXPECT_EQ(s.arg, arg);
}

void expect_steps_eq(const std::vector<Step>& got, const std::vector<Step>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(Step)) == 0) continue;
    ADD_FAILURE() << "step " << i << ": head " << got[i].head << " old " << got[i].old << " size " << got[i].size
                  << " arg " << got[i].arg << ", want head " << want[i].head << " old " << want[i].old << " size "
                  << want[i].size << " arg " << want[i].arg;
    return;
  }
}

uint64_t saturate(u128 v) { return v > UINT64_MAX ? UINT64_MAX : uint64_t(v); }

// The replay's view of a trace, recomputed here from the events in seq order
// with build_plan's rules: replay ids are dense, 1, 2, 3, ... in order of
// creation, where a successful producing call creates one, and so does a
// realloc that failed in the trace of a live object (the object it kept is
// known by the new id from then on, and belongs to that call's replay thread);
// consumes of objects a truncated trace lost are dropped, reallocs of them
// replayed with NULL.
struct Model {
  struct Obj {
    uint64_t bytes;
    uint64_t id;      // replay id
    uint32_t thread;  // replay thread that produced it or last kept it
  };
  std::map<uint64_t, Obj> live;  // by trace id
  uint64_t max_id = 0, objects = 0, failed_reallocs = 0, skipped_lost = 0, realloc_of_lost = 0;
  uint64_t cross = 0, peak = 0;
  u128 bytes = 0, requested = 0;

  // The step call `e` becomes on replay thread k (nullopt: dropped).
  std::optional<Step> step(const Event& e, uint32_t k) {
    Step s{};
    s.size = e.size;
    s.arg = trace::op_has(e.op, trace::kCount) ? e.count : e.align;
    uint64_t id = 0;
    if (trace::op_consumes(e.op) && e.old != 0) {
      auto it = live.find(e.old);
      if (it == live.end()) {
        if (e.op != Op::realloc && e.op != Op::reallocarray) {
          ++skipped_lost;
          return std::nullopt;
        }
        ++realloc_of_lost;  // old stays 0
      } else {
        s.old = it->second.id;
        if (it->second.thread != k) ++cross;
        if (e.flags & trace::kFailed) {
          id = ++max_id;
          ++failed_reallocs;
          it->second.id = id;
          it->second.thread = k;
        } else {
          bytes -= it->second.bytes;
          live.erase(it);
        }
      }
    }
    if (trace::op_produces(e.op) && !(e.flags & trace::kNullResult)) {
      id = ++max_id;
      ++objects;
      live[e.id] = {e.requested_bytes(), id, k};
      bytes += e.requested_bytes();
      requested += e.requested_bytes();
      peak = std::max(peak, saturate(bytes));
    }
    s.head = uint64_t(idx(e.op)) | uint64_t{e.flags} << 8 | id << 16;
    return s;
  }
};

// What build_plan should make of a trace: each replay thread's steps and the
// summary numbers, from the Model.
struct Expected {
  std::vector<std::vector<Step>> steps;  // per replay thread
  uint64_t total_steps = 0, max_id = 0, objects = 0, failed_reallocs = 0, peak = 0, end = 0, requested = 0, cross = 0,
           skipped_lost = 0, realloc_of_lost = 0;
  std::array<uint64_t, trace::kOpCount> ops{};
};
Expected expected_of(const std::vector<Event>& events, const std::vector<uint32_t>& replay_of) {
  Expected x;
  uint32_t threads = 0;
  for (uint32_t k : replay_of)
    if (k != UINT32_MAX) threads = std::max(threads, k + 1);
  x.steps.resize(threads);
  Model m;
  for (const Event& e : events) {
    if (!is_call(e)) continue;
    const uint32_t k = replay_of.at(e.thread);
    const std::optional<Step> s = m.step(e, k);
    if (!s) continue;
    x.steps.at(k).push_back(*s);
    PlanStep packed[2];
    x.total_steps += pack_step(*s, packed);  // PlanSteps: a kStepExt first where the step needs one
    ++x.ops[idx(e.op)];
  }
  x.max_id = m.max_id;
  x.objects = m.objects;
  x.failed_reallocs = m.failed_reallocs;
  x.peak = m.peak;
  x.end = saturate(m.bytes);
  x.requested = saturate(m.requested);
  x.cross = m.cross;
  x.skipped_lost = m.skipped_lost;
  x.realloc_of_lost = m.realloc_of_lost;
  return x;
}

// The largest trace id of `events` (for a complete trace: how many objects
// it creates).
uint64_t trace_max_id(const std::vector<Event>& events) {
  uint64_t m = 0;
  for (const Event& e : events) m = std::max(m, e.id);
  return m;
}

// ------------------------------------------------------------ packed steps

// The plan's file holds a step in 16 bytes, or 32 with a kStepExt first
// where it has an object consumed besides its ref, or an arg; unpacked, it
// is the step again, field for field.
TEST(PlanStepPacking, SixteenBytesOrAKStepExtFirst) {
  const auto step = [](unsigned op, uint64_t id, uint64_t old, uint64_t size, uint64_t arg, uint8_t flags = 0) {
    return Step{op | uint64_t{flags} << 8 | id << 16, old, size, arg};
  };
  const uint64_t a = make_ref(7, 3), b = make_ref(0xfffffffe, kMaxGeneration);
  struct Case {
    Step s;
    unsigned units;
  };
  const std::vector<Case> cases = {
      {step(idx(Op::malloc), a, 0, 100, 0), 1},
      {step(idx(Op::op_new), b, 0, ~uint64_t{0}, 0, kFailedFlags), 1},
      {step(idx(Op::free), 0, a, 0, 0), 1},
      {step(idx(Op::free), 0, 0, 0, 0), 1},  // free(NULL)
      {step(idx(Op::op_delete_sized), 0, b, uint64_t{1} << 40, 0), 1},
      {step(idx(Op::realloc), b, a, 300, 0), 2},
      {step(idx(Op::realloc), a, 0, 300, 0), 1},  // realloc(NULL, n)
      {step(idx(Op::realloc), 0, a, 0, 0, trace::kNullResult), 2},
      {step(idx(Op::reallocarray), a, b, 10, 5), 2},
      {step(idx(Op::calloc), a, 0, 40, 3), 2},
      {step(idx(Op::posix_memalign), a, 0, 256, 64), 2},
      {step(idx(Op::op_delete_sized_aligned), 0, a, 48, 32), 2},
      {step(kStepHandoff, 0, 3, 1024, 0), 1},
      {step(kStepMap, a, 0, 8192, 0), 1},
      {step(kStepUnmap, b, a, 4096, 8192), 2},
      {step(kStepArg, 0, 0, 8192, 0), 1},
      {step(kStepRemap, b, a, 16384, 0), 2},
      {step(kStepTouchObject, 0, a, 4096, 0), 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("op " + std::to_string(c.s.head & 0xff));
    PlanStep p[2];
    const unsigned n = pack_step(c.s, p);
    ASSERT_EQ(n, c.units);
    if (n == 2) {
      EXPECT_EQ(p[0].op(), kStepExt);
    }
    EXPECT_EQ(p[n - 1].op(), c.s.head & 0xff);
    EXPECT_EQ(p[n - 1].flags(), c.s.flags());
    expect_steps_eq({unpack_step(p[n - 1], n == 2 ? &p[0] : nullptr)}, {c.s});
  }
}

// ------------------------------------------------------------ one thread, every field

// A hand-written trace: every step field, the per-op counts and the live
// byte accounting are exactly as constructed (realloc consumes before it
// produces, a failed call produces nothing, and a failed realloc keeps its
// object, with its bytes, but gives it a new replay id that its later free
// consumes), and thread_start/thread_end/lost are not steps.
TEST(PlanBuild, HandWrittenSingleThread) {
  std::vector<Event> evs = {
      ev(Op::thread_start),                      // 0
      alloc(100),                                // 1  id 1        live 100
      calloc_ev(3, 40),                          // 2  id 2        live 220
      realloc_ev(1, 300),                        // 3  id 3 (1)    live 420 (peak)
      reallocarray_ev(2, 5, 10),                 // 4  id 4 (2)    live 350
      release(3),                                // 5  free        live 50
      aligned_ev(Op::posix_memalign, 64, 256),   // 6  id 5        live 306
      aligned_ev(Op::op_new_aligned, 32, 48),    // 7  id 6        live 354
      release(6, 0, 0, Op::op_delete_sized),     // 8  sized del   live 306
      release(0),                                // 9  free(NULL)
      failed(alloc(uint64_t{1} << 40)),          // 10 no object
      failed(realloc_ev(5, uint64_t{1} << 41)),  // 11 5 stays live, replay id 7
      release(5),                                // 12 free of 7   live 50
      lost_ev(7),                                // 13
      ev(Op::thread_end),                        // 14
  };
  evs[8].size = 48;
  auto b = build(evs);
  const PlanSummary& s = b->summary;
  const MappedPlan& p = *b->plan;

  EXPECT_EQ(s.events, 15u);
  // 12 calls in 18 PlanSteps: the calloc, the three reallocs (an object
  // consumed besides the one produced) and the two aligned calls come
  // after a kStepExt each.
  EXPECT_EQ(s.steps, 18u);
  EXPECT_EQ(s.objects, 6u);  // trace ids 1..6
  EXPECT_EQ(s.max_id, 7u);   // and the failed realloc's new id
  EXPECT_EQ(s.live_bytes_peak, 420u);
  EXPECT_EQ(s.live_bytes_end, 50u);
  EXPECT_EQ(s.bytes_requested, 100u + 120u + 300u + 50u + 256u + 48u);
  EXPECT_EQ(s.skipped_lost, 0u);
  EXPECT_EQ(s.realloc_of_lost, 0u);
  EXPECT_EQ(s.cross_thread_consumes, 0u);
  EXPECT_EQ(s.recorded_threads, 1u);
  EXPECT_EQ(s.replay_threads, 1u);
  EXPECT_EQ(s.fold, (std::vector<std::vector<uint32_t>>{{0}}));
  EXPECT_FALSE(s.has_times);
  EXPECT_EQ(s.duration_ns, 0u);

  std::array<uint64_t, trace::kOpCount> ops{};
  ops[idx(Op::malloc)] = 2;
  ops[idx(Op::calloc)] = 1;
  ops[idx(Op::realloc)] = 2;
  ops[idx(Op::reallocarray)] = 1;
  ops[idx(Op::free)] = 3;
  ops[idx(Op::posix_memalign)] = 1;
  ops[idx(Op::op_new_aligned)] = 1;
  ops[idx(Op::op_delete_sized)] = 1;
  EXPECT_EQ(s.ops, ops);  // no thread_start, thread_end or lost

  EXPECT_EQ(p.threads(), 1u);
  EXPECT_EQ(p.max_id(), 7u);
  EXPECT_EQ(p.total_steps(), 18u);
  EXPECT_EQ(p.expected_ops(), ops);
  EXPECT_FALSE(p.has_times());
  EXPECT_EQ(p.times(0), nullptr);
  EXPECT_EQ(p.mapped_bytes() % 4096, 0u);
  ASSERT_EQ(p.step_count(0), 18u);

  const std::vector<Step> dense = steps_of(p, 0);
  const Step* st = dense.data();
  expect_step(st[0], Op::malloc, 0, 1, 0, 100, 0, 0);
  expect_step(st[1], Op::calloc, 0, 2, 0, 40, 3, 1);  // size = element size, arg = count
  expect_step(st[2], Op::realloc, 0, 3, 1, 300, 0, 2);
  expect_step(st[3], Op::reallocarray, 0, 4, 2, 10, 5, 3);
  expect_step(st[4], Op::free, 0, 0, 3, 0, 0, 4);
  expect_step(st[5], Op::posix_memalign, 0, 5, 0, 256, 64, 5);  // arg = alignment
  expect_step(st[6], Op::op_new_aligned, 0, 6, 0, 48, 32, 6);
  expect_step(st[7], Op::op_delete_sized, 0, 0, 6, 48, 0, 7);  // size of a sized delete
  expect_step(st[8], Op::free, 0, 0, 0, 0, 0, 8);              // free(NULL)
  expect_step(st[9], Op::malloc, kFailedFlags, 0, 0, uint64_t{1} << 40, 0, 9);
  expect_step(st[10], Op::realloc, kFailedFlags, 7, 5, uint64_t{1} << 41, 0, 10);
  expect_step(st[11], Op::free, 0, 0, 7, 0, 0, 11);  // the kept object's new id

  // The packed head: op | flags << 8 | id << 16.
  EXPECT_EQ(st[2].head, uint64_t{2} | uint64_t{3} << 16);
  EXPECT_EQ(st[10].head, uint64_t{2} | uint64_t{3} << 8 | uint64_t{7} << 16);

  // The model gives the same.
  const Expected x = expected_of(b->events, {0});
  ASSERT_EQ(x.steps.size(), 1u);
  expect_steps_eq(steps_of(p, 0), x.steps[0]);
  EXPECT_EQ(x.max_id, 7u);
  EXPECT_EQ(x.objects, 6u);
  EXPECT_EQ(x.failed_reallocs, 1u);
}

// The file given to build_plan is closed whatever it throws, the first
// check included (before the plan file took it over, it stayed open).
TEST(PlanBuild, GivenFileIsClosedWhateverItThrows) {
  std::vector<Event> evs = {alloc(100), release(1)};
  TempDir dir;
  const std::string path = dir.file("t.hlt");
  trace::testutil::write_trace(path, evs, WriterOptions{});
  auto r = TraceReader::open(path);
  for (const bool refs : {true, false}) {
    SCOPED_TRACE(refs);
    const int fd = open(dir.file("plan").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    PlanOptions opt;
    opt.live_limit = refs ? 0 : 50;  // (event refs with slot reuse on; a heap past the limit)
    std::vector<uint64_t> event_refs;
    PlanSummary s;
    EXPECT_THROW(build_plan(*r, opt, s, fd, refs ? &event_refs : nullptr), PlanError);
    errno = 0;
    EXPECT_EQ(fcntl(fd, F_GETFD), -1);
    EXPECT_EQ(errno, EBADF);
  }
}

// PlanOptions::live_limit: the build stops at the first event whose live
// requested bytes pass it, and says where; a heap that only reaches it
// builds.
TEST(PlanBuild, LiveLimitStopsWhereTheHeapPassesIt) {
  std::vector<Event> evs = {
      alloc(100),          // 0  live 100
      calloc_ev(3, 40),    // 1  live 220
      realloc_ev(1, 300),  // 2  live 420 (peak)
      release(3),          // 3  live 120
  };
  PlanOptions opt;
  opt.live_limit = 420;
  EXPECT_EQ(build(evs, opt)->summary.live_bytes_peak, 420u);
  for (const auto& [limit, live, seq] :
       {std::tuple<uint64_t, uint64_t, uint64_t>{419, 420, 2}, {150, 220, 1}, {99, 100, 0}}) {
    SCOPED_TRACE(limit);
    opt.live_limit = limit;
    try {
      build(evs, opt);
      ADD_FAILURE() << "built past the limit";
    } catch (const PlanLiveLimit& e) {
      EXPECT_EQ(e.live_bytes, live);
      EXPECT_EQ(e.event, seq + 1);
      EXPECT_EQ(e.events, 4u);
      EXPECT_EQ(e.limit, limit);
    }
  }
}

// realloc(NULL, n) consumes nothing, and realloc(p, 0) returning NULL (null
// result without failure) releases p and produces nothing.
TEST(PlanBuild, ReallocOfNullAndReallocToZero) {
  std::vector<Event> evs = {
      realloc_ev(0, 64),  // 0 id 1, realloc(NULL, 64)
      realloc_ev(1, 0),   // 1 frees 1, returns NULL
      alloc(8),           // 2 id 2
  };
  evs[1].flags = trace::kNullResult;
  auto b = build(evs);
  EXPECT_EQ(b->summary.steps, 4u);  // (realloc(1, 0) consumes: a kStepExt before it)
  EXPECT_EQ(b->summary.live_bytes_peak, 64u);
  EXPECT_EQ(b->summary.live_bytes_end, 8u);
  EXPECT_EQ(b->summary.bytes_requested, 72u);
  const std::vector<Step> dense = steps_of(*b->plan, 0);
  const Step* st = dense.data();
  expect_step(st[0], Op::realloc, 0, 1, 0, 64, 0, 0);
  expect_step(st[1], Op::realloc, trace::kNullResult, 0, 1, 0, 0, 1);
  expect_step(st[2], Op::malloc, 0, 2, 0, 8, 0, 2);
  EXPECT_EQ(b->summary.objects, 2u);
  EXPECT_EQ(b->summary.max_id, 2u);
  EXPECT_EQ(b->plan->max_id(), 2u);
}

// Failed reallocs (and reallocarrays) of live objects on two threads: each
// produces a fresh replay id (the next one in creation order) and consumes
// the object's current one; later consumers of the trace object use the new
// id; its bytes stay live; and the object belongs to the failed call's
// replay thread from then on, which decides what is a cross-thread consume.
// A failed realloc(NULL, n) produces and consumes nothing.
TEST(PlanBuild, FailedReallocGivesTheKeptObjectANewId) {
  const uint64_t huge = uint64_t{1} << 40;
  std::vector<Event> evs = {
      alloc(8, 0),                                   // 0 trace 1 -> replay 1              live 8
      failed(realloc_ev(1, huge, 1)),                // 1 keeps 1 -> replay 2 (old 1), cross
      alloc(16, 1),                                  // 2 trace 2 -> replay 3              live 24
      failed(reallocarray_ev(1, 1 << 20, huge, 1)),  // 3 keeps 1 -> replay 4 (old 2)
      release(1, 0),                                 // 4 free of 4, cross                 live 16
      failed(realloc_ev(0, huge, 0)),                // 5 realloc(NULL): no ids
      failed(realloc_ev(2, huge, 1)),                // 6 keeps 2 -> replay 5 (old 3)
      realloc_ev(2, 32, 0),                          // 7 trace 3 -> replay 6 (old 5), cross live 32
      release(3, 0),                                 // 8 free of 6                        live 0
  };
  auto b = build(evs);
  const PlanSummary& s = b->summary;
  const MappedPlan& p = *b->plan;
  EXPECT_EQ(s.steps, 13u);  // 9 calls; the reallocs with an object besides the one made come after a kStepExt
  EXPECT_EQ(s.objects, 3u);
  EXPECT_EQ(s.max_id, 6u);
  EXPECT_EQ(p.max_id(), 6u);
  EXPECT_EQ(s.live_bytes_peak, 32u);
  EXPECT_EQ(s.live_bytes_end, 0u);
  EXPECT_EQ(s.bytes_requested, 8u + 16u + 32u);
  EXPECT_EQ(s.cross_thread_consumes, 3u);  // steps 1, 4 and 7 (not 3 and 6)
  EXPECT_EQ(s.skipped_lost, 0u);
  EXPECT_EQ(s.realloc_of_lost, 0u);
  std::array<uint64_t, trace::kOpCount> ops{};
  ops[idx(Op::malloc)] = 2;
  ops[idx(Op::realloc)] = 4;
  ops[idx(Op::reallocarray)] = 1;
  ops[idx(Op::free)] = 2;
  EXPECT_EQ(s.ops, ops);

  ASSERT_EQ(p.threads(), 2u);
  ASSERT_EQ(p.step_count(0), 6u);
  ASSERT_EQ(p.step_count(1), 7u);
  const Expected x = expected_of(b->events, {0, 1});
  ASSERT_EQ(x.steps.size(), 2u);
  const std::vector<Step> d0 = steps_of(p, 0, x.steps), d1 = steps_of(p, 1, x.steps);
  ASSERT_EQ(d0.size(), 5u);
  ASSERT_EQ(d1.size(), 4u);
  const Step* t0 = d0.data();
  expect_step(t0[0], Op::malloc, 0, 1, 0, 8, 0, 0);
  expect_step(t0[1], Op::free, 0, 0, 4, 0, 0, 1);
  expect_step(t0[2], Op::realloc, kFailedFlags, 0, 0, huge, 0, 2);
  expect_step(t0[3], Op::realloc, 0, 6, 5, 32, 0, 3);
  expect_step(t0[4], Op::free, 0, 0, 6, 0, 0, 4);
  const Step* t1 = d1.data();
  expect_step(t1[0], Op::realloc, kFailedFlags, 2, 1, huge, 0, 0);
  expect_step(t1[1], Op::malloc, 0, 3, 0, 16, 0, 1);
  expect_step(t1[2], Op::reallocarray, kFailedFlags, 4, 2, huge, 1 << 20, 2);
  expect_step(t1[3], Op::realloc, kFailedFlags, 5, 3, huge, 0, 3);

  expect_steps_eq(d0, x.steps[0]);
  expect_steps_eq(d1, x.steps[1]);
  EXPECT_EQ(x.cross, 3u);
  EXPECT_EQ(x.max_id, 6u);
  EXPECT_EQ(x.failed_reallocs, 3u);

  // Folded onto one replay thread: the same ids in seq order, no crossing.
  PlanOptions one;
  one.threads = 1;
  std::vector<Event> copy = evs;
  auto f = build(copy, one);
  EXPECT_EQ(f->summary.max_id, 6u);
  EXPECT_EQ(f->summary.objects, 3u);
  EXPECT_EQ(f->summary.cross_thread_consumes, 0u);
  std::vector<Step> all;
  for (size_t i = 0, i0 = 0, i1 = 0; i < evs.size(); ++i) all.push_back(f->events[i].thread == 0 ? t0[i0++] : t1[i1++]);
  expect_steps_eq(steps_of(*f->plan, 0), all);
}

// ------------------------------------------------------------ generated traces

// Generated multi-thread traces (every op kind, failures, NULL frees, lost
// markers, huge sizes): with one replay thread per recorded thread, each
// replay thread's steps are exactly its recorded thread's calls in order,
// with the replay ids the Model assigns (the trace's ids until the first
// failed realloc of a live object, which takes a new one), and the summary
// matches numbers recomputed here in seq order.
TEST(PlanBuild, GeneratedTracesOneReplayThreadPerRecordedThread) {
  for (bool all_ops : {true, false}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + (all_ops ? " all ops" : " malloc/free"));
      trace::testutil::GenOptions go;
      go.threads = 4;
      go.all_ops = all_ops;
      go.max_live = 300;
      auto evs = trace::testutil::generate(seed, 20000, go);
      auto b = build(evs);
      const PlanSummary& s = b->summary;
      const MappedPlan& p = *b->plan;
      ASSERT_EQ(b->events.size(), 20000u + (all_ops ? 4u : 0u));

      std::vector<uint32_t> active;
      for (const Event& e : b->events)
        if (std::find(active.begin(), active.end(), e.thread) == active.end()) active.push_back(e.thread);
      std::sort(active.begin(), active.end());
      ASSERT_EQ(active.size(), 4u);
      std::vector<std::vector<uint32_t>> identity;
      for (uint32_t t : active) identity.push_back({t});
      EXPECT_EQ(s.fold, identity);
      EXPECT_EQ(s.recorded_threads, 4u);
      EXPECT_EQ(s.replay_threads, 4u);
      ASSERT_EQ(p.threads(), 4u);

      std::vector<uint32_t> replay_of(4);
      for (uint32_t k = 0; k < 4; ++k) replay_of[active[k]] = k;
      const Expected x = expected_of(b->events, replay_of);
      ASSERT_EQ(x.steps.size(), 4u);
      for (uint32_t k = 0; k < 4; ++k) {
        SCOPED_TRACE("replay thread " + std::to_string(k));
        std::vector<Step> calls;  // the recorded thread's calls, in order
        for (const Event& e : b->events)
          if (e.thread == active[k] && is_call(e)) calls.push_back(step_of(e));
        ASSERT_EQ(x.steps[k].size(), calls.size());
        for (size_t i = 0; i < calls.size(); ++i) {  // the same calls, only the ids differ
          EXPECT_EQ(x.steps[k][i].op(), calls[i].op());
          EXPECT_EQ(x.steps[k][i].size, calls[i].size);
        }
        expect_steps_eq(steps_of(p, k, x.steps), x.steps[k]);
        if (!all_ops) expect_steps_eq(steps_of(p, k, x.steps), calls);  // no failures: trace ids
      }

      EXPECT_EQ(s.events, b->events.size());
      EXPECT_EQ(s.steps, x.total_steps);
      EXPECT_EQ(p.total_steps(), x.total_steps);
      EXPECT_EQ(s.ops, x.ops);
      EXPECT_EQ(p.expected_ops(), x.ops);
      // A complete trace: objects are its ids 1..n, and each failed realloc
      // of a live object adds one replay id.
      EXPECT_EQ(x.objects, trace_max_id(b->events));
      EXPECT_EQ(x.max_id, x.objects + x.failed_reallocs);
      if (all_ops)
        EXPECT_GT(x.failed_reallocs, 0u);
      else
        EXPECT_EQ(x.failed_reallocs, 0u);
      EXPECT_EQ(s.objects, x.objects);
      EXPECT_EQ(s.max_id, x.max_id);
      EXPECT_EQ(p.max_id(), x.max_id);
      EXPECT_EQ(s.live_bytes_peak, x.peak);
      EXPECT_EQ(s.live_bytes_end, x.end);
      EXPECT_EQ(s.bytes_requested, x.requested);
      EXPECT_EQ(s.cross_thread_consumes, x.cross);
      EXPECT_GT(x.cross, 0u);
      EXPECT_EQ(s.skipped_lost, 0u);
      EXPECT_EQ(s.realloc_of_lost, 0u);
    }
  }
}

// A plan far larger than the builder's buffers: its events come through
// many read-ahead batches and its arrays through the writer thread, which
// holds at most 32 MiB at once (here 1.2 M steps of 32 bytes: 37 MiB), and
// every step lands where it belongs.
TEST(PlanBuild, LongPlanThroughTheWriterAndReadAhead) {
  trace::testutil::GenOptions go;
  go.threads = 2;
  go.all_ops = false;
  go.max_live = 5000;
  go.timestamps = true;
  auto evs = trace::testutil::generate(7, 1200000, go);
  PlanOptions opt;
  opt.times = true;
  opt.live = true;
  TempDir dir;
  WriterOptions wo;
  wo.timestamps = true;
  trace::testutil::write_trace(dir.file("long.hlt"), evs, wo);
  auto r = TraceReader::open(dir.file("long.hlt"));
  auto b = build_from(*r, opt);
  const MappedPlan& p = *b->plan;
  // The same plan, byte for byte, built on this thread alone.
  {
    PlanOptions alone = opt;
    alone.helpers = false;
    auto c = build_from(*r, alone);
    const auto bytes = [](int fd) {
      struct stat st {};
      EXPECT_EQ(fstat(fd, &st), 0);
      std::string out(size_t(st.st_size), '\0');
      EXPECT_EQ(pread(fd, out.data(), out.size(), 0), ssize_t(out.size()));
      return out;
    };
    EXPECT_TRUE(bytes(b->fd) == bytes(c->fd));
  }
  ASSERT_EQ(p.threads(), 2u);
  std::vector<uint32_t> active;
  for (const Event& e : b->events)
    if (std::find(active.begin(), active.end(), e.thread) == active.end()) active.push_back(e.thread);
  std::sort(active.begin(), active.end());
  std::vector<uint32_t> replay_of(*std::max_element(active.begin(), active.end()) + 1);
  for (uint32_t k = 0; k < active.size(); ++k) replay_of[active[k]] = k;
  const Expected x = expected_of(b->events, replay_of);
  EXPECT_EQ(p.total_steps(), x.total_steps);
  EXPECT_GT(p.total_steps() * p.step_bytes(), uint64_t{36} << 20);
  for (uint32_t k = 0; k < 2; ++k) {
    SCOPED_TRACE("replay thread " + std::to_string(k));
    expect_steps_eq(steps_of(p, k, x.steps), x.steps[k]);
    // Times and live sums: each call's, at its step.
    std::unordered_map<uint64_t, uint64_t> bytes_of;  // live objects' requested bytes
    uint64_t n = 0;
    int64_t live = 0;
    for (const Event& e : b->events) {
      if (!is_call(e)) continue;
      int64_t delta = 0;
      if (trace::op_consumes(e.op) && e.old != 0 && !(e.flags & trace::kFailed)) {
        delta -= int64_t(bytes_of.at(e.old));
        bytes_of.erase(e.old);
      }
      if (trace::op_produces(e.op) && !(e.flags & trace::kNullResult)) {
        delta += int64_t(e.requested_bytes());
        bytes_of[e.id] = e.requested_bytes();
      }
      if (e.thread != active[k]) continue;
      live += delta;
      while (n < p.step_count(k) && (p.steps(k)[n].op() == kStepHandoff || p.steps(k)[n].op() == kStepExt)) ++n;
      ASSERT_LT(n, p.step_count(k));
      ASSERT_EQ(p.times(k)[n], e.time) << "step " << n;
      ASSERT_EQ(p.live(k)[n], live) << "step " << n;
      ++n;
    }
  }
  EXPECT_EQ(b->summary.live_bytes_peak, x.peak);
  EXPECT_EQ(b->summary.live_bytes_end, x.end);
}

// An inconsistency far into a long trace is named exactly, after the
// builder's helper threads have read ahead of it and written behind it.
TEST(PlanErrors, LateInconsistencyInALongTrace) {
  std::vector<Event> evs;
  for (uint32_t i = 0; i < 300000; ++i) {
    evs.push_back(alloc(16, i % 2));
    evs.push_back(release(i + 1, i % 2));
  }
  evs.push_back(release(7, 1));
  EXPECT_EQ(plan_error(evs), "inconsistent trace: event 600000 (thread 1, free): object 7 was already freed");
}

// An inconsistency in the middle of a long trace stops the build there: the
// read-ahead thread, which decodes faster than the builder plans and is then
// usually waiting for room in its full ring (65,536 events ahead), is
// stopped and joined (a lost wake-up would hang here).
TEST(PlanErrors, InconsistencyMidwayInALongTraceStopsTheReadAhead) {
  std::vector<Event> evs;
  for (uint32_t i = 0; i < 300000; ++i) {
    evs.push_back(alloc(16, i % 2));
    evs.push_back(release(i + 1, i % 2));
    if (i == 150000) evs.push_back(release(1, 1));
  }
  EXPECT_EQ(plan_error(evs), "inconsistent trace: event 300002 (thread 1, free): object 1 was already freed");
}

// A chunk damaged far into a long trace: the read-ahead thread's reading
// error reaches the builder, in the reader's own words (the file and the
// damaged block's offset), once it has planned every batch before it.
TEST(PlanErrors, DamagedChunkFarIntoALongTraceIsThrownWhereTheBuilderReachesIt) {
  std::vector<Event> evs;
  for (uint32_t i = 0; i < 300000; ++i) {
    evs.push_back(alloc(16 + i % 64, i % 2));
    evs.push_back(release(i + 1, i % 2));
  }
  TempDir dir;
  const std::string path = dir.file("damaged.hlt");
  trace::testutil::write_trace(path, evs, WriterOptions{});
  auto r = TraceReader::open(path);
  ASSERT_GE(r->chunks().size(), 8u);
  // A byte in the middle of the fourth chunk from the end.
  const size_t n = r->chunks().size();
  const uint64_t block = r->chunks()[n - 4].offset, at = (block + r->chunks()[n - 3].offset) / 2;
  r.reset();
  {
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, off_t(at)), 1);
    byte = char(byte ^ 0x5a);
    ASSERT_EQ(pwrite(fd, &byte, 1, off_t(at)), 1);
    close(fd);
  }
  r = TraceReader::open(path);
  std::string what;
  try {
    PlanSummary s;
    close(build_plan(*r, PlanOptions{}, s));
  } catch (const trace::TraceError& e) {
    what = e.what();
  }
  EXPECT_EQ(what.rfind(path + ": offset " + std::to_string(block) + ": ", 0), 0u) << what;
}

// ------------------------------------------------------------ folding

// A 5-thread malloc/free trace with 2, 6, 6, 4 and 4 events on threads 0..4,
// many of its frees done by another thread than the malloc.
std::vector<Event> five_threads() {
  return {
      alloc(10, 1),    // 0  id 1
      alloc(20, 2),    // 1  id 2
      alloc(30, 0),    // 2  id 3
      alloc(40, 3),    // 3  id 4
      alloc(50, 4),    // 4  id 5
      release(1, 2),   // 5
      release(2, 1),   // 6
      release(5, 0),   // 7
      alloc(60, 1),    // 8  id 6
      alloc(70, 2),    // 9  id 7
      release(3, 3),   // 10
      release(4, 4),   // 11
      release(7, 1),   // 12
      release(6, 2),   // 13
      alloc(80, 1),    // 14 id 8
      alloc(90, 2),    // 15 id 9
      alloc(100, 3),   // 16 id 10
      alloc(110, 4),   // 17 id 11
      release(8, 1),   // 18
      release(9, 2),   // 19
      release(11, 3),  // 20
      release(10, 4),  // 21
  };
}

// Greedy fold recomputed here: threads by descending event count (ties by
// index), each onto the least loaded replay thread (ties: the lowest).
std::vector<std::vector<uint32_t>> greedy_fold(const std::vector<uint64_t>& counts, uint32_t threads) {
  std::vector<uint32_t> order(counts.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return counts[a] > counts[b]; });
  std::vector<std::vector<uint32_t>> fold(threads);
  std::vector<uint64_t> load(threads, 0);
  for (uint32_t t : order) {
    uint32_t best = 0;
    for (uint32_t k = 1; k < threads; ++k)
      if (load[k] < load[best]) best = k;
    fold[best].push_back(t);
    load[best] += counts[t];
  }
  for (auto& f : fold) std::sort(f.begin(), f.end());
  return fold;
}

std::vector<uint64_t> thread_counts(const std::vector<Event>& events, uint32_t threads) {
  std::vector<uint64_t> c(threads, 0);
  for (const Event& e : events) ++c[e.thread];
  return c;
}

// Checks that `b`'s plan runs, on each replay thread, the calls of its
// recorded threads merged in global seq order (with the Model's replay ids),
// and that every recorded thread is in exactly one replay thread.
void expect_folded_plan(const Built& b, uint32_t recorded) {
  const auto& fold = b.summary.fold;
  std::vector<uint32_t> replay_of(recorded, UINT32_MAX);
  for (uint32_t k = 0; k < fold.size(); ++k)
    for (uint32_t t : fold[k]) {
      ASSERT_LT(t, recorded);
      EXPECT_EQ(replay_of[t], UINT32_MAX) << "thread " << t << " assigned twice";
      replay_of[t] = k;
    }
  for (uint32_t t = 0; t < recorded; ++t) EXPECT_NE(replay_of[t], UINT32_MAX) << "thread " << t;
  ASSERT_EQ(b.plan->threads(), fold.size());
  const Expected x = expected_of(b.events, replay_of);
  ASSERT_EQ(x.steps.size(), fold.size());
  for (uint32_t k = 0; k < fold.size(); ++k) {
    SCOPED_TRACE("replay thread " + std::to_string(k));
    std::vector<Op> ops;  // the calls of its recorded threads, in seq order
    for (const Event& e : b.events)
      if (replay_of[e.thread] == k && is_call(e)) ops.push_back(e.op);
    ASSERT_EQ(x.steps[k].size(), ops.size());
    for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(x.steps[k][i].op(), ops[i]) << i;
    expect_steps_eq(steps_of(*b.plan, k, x.steps), x.steps[k]);
  }
  EXPECT_EQ(b.summary.cross_thread_consumes, x.cross);
  EXPECT_EQ(b.summary.live_bytes_peak, x.peak);
  EXPECT_EQ(b.summary.steps, x.total_steps);
  EXPECT_EQ(b.summary.objects, x.objects);
  EXPECT_EQ(b.summary.max_id, x.max_id);
  EXPECT_EQ(b.plan->max_id(), x.max_id);
}

// Folding 5 recorded threads onto 2: largest first onto the least loaded,
// ties kept in thread order and going to the lowest replay thread; each
// replay thread's steps are its threads' calls merged in seq order.
TEST(PlanFold, FiveThreadsOntoTwo) {
  // Event counts 2, 6, 6, 4, 4: order t1 t2 t3 t4 t0; loads (6,0) (6,6)
  // (10,6) (10,10) (12,10).
  auto evs = five_threads();
  ASSERT_EQ(thread_counts(evs, 5), (std::vector<uint64_t>{2, 6, 6, 4, 4}));
  {
    TempDir dir;
    trace::testutil::write_trace(dir.file("t.hlt"), evs, WriterOptions{});
    auto r = TraceReader::open(dir.file("t.hlt"));
    EXPECT_EQ(fold_threads(*r, 2), (std::vector<std::vector<uint32_t>>{{0, 1, 3}, {2, 4}}));
  }
  PlanOptions opt;
  opt.threads = 2;
  auto b = build(evs, opt);
  EXPECT_EQ(b->summary.fold, (std::vector<std::vector<uint32_t>>{{0, 1, 3}, {2, 4}}));
  EXPECT_EQ(b->summary.recorded_threads, 5u);
  EXPECT_EQ(b->summary.replay_threads, 2u);
  expect_folded_plan(*b, 5);
  // Frees 5, 6, 7, 11, 12, 13, 20, 21 cross between {0, 1, 3} and {2, 4}.
  EXPECT_EQ(b->summary.cross_thread_consumes, 8u);
  EXPECT_EQ(b->summary.live_bytes_peak, 380u);  // after event 17: 80+90+100+110
  EXPECT_EQ(b->summary.objects, 11u);
  EXPECT_EQ(b->summary.max_id, 11u);  // no failed reallocs: the trace's ids
}

// The same on generated traces with uneven thread loads, for several fold
// widths: the fold is the greedy one recomputed here.
TEST(PlanFold, GeneratedTracesMatchGreedyFold) {
  for (uint64_t seed : {7u, 8u}) {
    trace::testutil::GenOptions go;
    go.threads = 5;
    go.all_ops = true;
    go.max_live = 200;
    auto evs = trace::testutil::generate(seed, 6000, go);
    // Make the loads uneven: move some of thread 4's and 3's calls to 0.
    // (Producers keep their ids' owner; only the thread index changes.)
    for (Event& e : evs)
      if ((e.thread == 4 || e.thread == 3) && e.seq % 3 == 0 && is_call(e)) e.thread = 0;
    for (uint32_t threads : {2u, 3u, 4u}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(threads) + " threads");
      PlanOptions opt;
      opt.threads = threads;
      std::vector<Event> copy = evs;
      auto b = build(copy, opt);
      EXPECT_EQ(b->summary.fold, greedy_fold(thread_counts(b->events, 5), threads));
      EXPECT_EQ(b->summary.replay_threads, threads);
      expect_folded_plan(*b, 5);
      EXPECT_GT(b->summary.max_id, b->summary.objects);  // it has failed reallocs
    }
  }
}

// threads = 0 and threads >= the recorded threads give one replay thread per
// recorded thread (the active ones, which need not be dense).
TEST(PlanFold, ZeroOrEnoughThreadsIsIdentity) {
  std::vector<Event> evs = {alloc(8, 5), alloc(8, 2), release(1, 0), release(2, 5), alloc(4, 2)};
  const std::vector<std::vector<uint32_t>> identity = {{0}, {2}, {5}};
  TempDir dir;
  trace::testutil::write_trace(dir.file("t.hlt"), evs, WriterOptions{});
  auto r = TraceReader::open(dir.file("t.hlt"));
  for (uint32_t threads : {0u, 3u, 4u, 100u}) {
    SCOPED_TRACE(threads);
    EXPECT_EQ(fold_threads(*r, threads), identity);
    PlanOptions opt;
    opt.threads = threads;
    auto b = build_from(*r, opt);
    EXPECT_EQ(b->summary.fold, identity);
    EXPECT_EQ(b->summary.replay_threads, 3u);
    ASSERT_EQ(b->plan->threads(), 3u);
    const std::vector<std::vector<Step>> want = {{step_of(b->events[2])},
                                                 {step_of(b->events[1]), step_of(b->events[4])},
                                                 {step_of(b->events[0]), step_of(b->events[3])}};
    for (uint32_t k = 0; k < 3; ++k) expect_steps_eq(steps_of(*b->plan, k, want), want[k]);
    EXPECT_EQ(b->summary.cross_thread_consumes, 2u);
    EXPECT_EQ(b->summary.objects, 3u);
    EXPECT_EQ(b->summary.max_id, 3u);
  }
  // One replay thread: everything in seq order.
  PlanOptions one;
  one.threads = 1;
  auto b = build_from(*r, one);
  EXPECT_EQ(b->summary.fold, (std::vector<std::vector<uint32_t>>{{0, 2, 5}}));
  std::vector<Step> all;
  for (const Event& e : b->events) all.push_back(step_of(e));
  expect_steps_eq(steps_of(*b->plan, 0), all);
  EXPECT_EQ(b->summary.cross_thread_consumes, 0u);
}

// Recorded threads that never ran at the same time share a replay thread,
// one after another, a kStepNewThread between them (the engine runs each on
// a thread of its own). Thread 0 runs throughout; 1 and 2 together; 3 starts
// after 1 ended (2 still runs), 4 after 2 ended; 5 never ends (no
// thread_end: it runs to the end of the trace). A memory call of 4's before
// 2 ended (the second trace) makes it start then: it overlaps 2.
TEST(PlanFold, ThreadsThatComeAndGoRunOneAfterAnother) {
  // (Each at 10 ns times its seq; thread 3's first call a calloc: a
  // kStepExt comes after the kStepNewThread.)
  auto events = [] {
    std::vector<Event> v = {alloc(8, 0),
                            ev(Op::thread_start, 1),
                            alloc(16, 1),  // 0-2
                            ev(Op::thread_start, 2),
                            alloc(24, 2),
                            release(2, 1),  // 3-5
                            ev(Op::thread_end, 1),
                            ev(Op::thread_start, 3),
                            calloc_ev(2, 16, 3),  // 6-8
                            release(3, 2),
                            ev(Op::thread_end, 2),
                            release(4, 3),  // 9-11
                            ev(Op::thread_end, 3),
                            alloc(40, 4),
                            ev(Op::thread_end, 4),  // 12-14
                            alloc(48, 5),
                            release(1, 0)};  // 15-16
    for (size_t i = 0; i < v.size(); ++i) v[i].time = 10 * i;
    return v;
  };

  const auto write = [&](const std::string& path, bool memory_call, bool found_gone = true) {
    WriterOptions wo;
    wo.timestamps = true;
    // (Only thread_ends written once the thread was found gone count: FORMAT.md.)
    if (found_gone) wo.metadata_json = R"({"capture":{"thread_ends":"found_gone"}})";
    trace::TraceWriter w(path, wo);
    for (Event e : events()) w.append(e);
    if (memory_call) {
      trace::MemoryEvent m;
      m.op = trace::MemOp::map;
      m.thread = 4;
      m.after = 9;  // between events 8 and 9
      m.region = 1;
      m.length = 4096;
      w.set_memory_events({m});
    }
    w.close();
  };
  using Fold = std::vector<std::vector<uint32_t>>;
  TempDir dir;
  write(dir.file("t.hlt"), false);
  auto r = TraceReader::open(dir.file("t.hlt"));
  EXPECT_EQ(threads_at_once(*r), 3u);
  const Fold groups = {{0}, {1, 3, 5}, {2, 4}};
  for (uint32_t threads : {0u, 3u, 5u}) {
    SCOPED_TRACE(threads);
    bool sequential = false;
    EXPECT_EQ(fold_threads(*r, threads, &sequential), groups);
    EXPECT_TRUE(sequential);
  }
  // Fewer replay threads than ever ran at once: folded by load, as before;
  // as many as the recorded threads: one each.
  bool sequential = true;
  EXPECT_EQ(fold_threads(*r, 2, &sequential).size(), 2u);
  EXPECT_FALSE(sequential);
  EXPECT_EQ(fold_threads(*r, 6, &sequential), (Fold{{0}, {1}, {2}, {3}, {4}, {5}}));
  EXPECT_FALSE(sequential);

  PlanOptions timed;
  timed.times = true;
  auto b = build_from(*r, timed);
  EXPECT_EQ(b->summary.fold, groups);
  EXPECT_TRUE(b->summary.sequential);
  EXPECT_EQ(b->summary.new_threads, 3u);
  EXPECT_EQ(b->summary.recorded_threads, 6u);
  EXPECT_EQ(b->summary.replay_threads, 3u);
  ASSERT_EQ(b->plan->threads(), 3u);
  const auto ops = [&](uint32_t k) {
    std::vector<unsigned> v;
    for (uint64_t i = 0; i < b->plan->step_count(k); ++i) v.push_back(b->plan->steps(k)[i].op());
    return v;
  };
  const unsigned m = idx(Op::malloc), f = idx(Op::free), c = idx(Op::calloc), n = kStepNewThread, x = kStepExt;
  EXPECT_EQ(ops(0), (std::vector<unsigned>{m, f}));
  EXPECT_EQ(ops(1), (std::vector<unsigned>{m, f, n, x, c, f, n, m}));
  EXPECT_EQ(ops(2), (std::vector<unsigned>{m, f, n, m}));
  // A kStepNewThread takes the time of the step before it (a paced replay
  // ends the thread then, not when the next one starts).
  const uint64_t* times = b->plan->times(1);
  ASSERT_NE(times, nullptr);
  EXPECT_EQ(std::vector<uint64_t>(times, times + 8), (std::vector<uint64_t>{20, 50, 50, 80, 80, 110, 110, 150}));
  for (uint32_t k = 1; k < 3; ++k)
    for (uint64_t i = 0; i < b->plan->step_count(k); ++i)
      if (b->plan->steps(k)[i].op() == n) {
        EXPECT_EQ(b->plan->steps(k)[i].ref(), 0u);
        EXPECT_EQ(b->plan->steps(k)[i].val, 0u);
      }
  // The same calls as one replay thread per recorded thread, none waiting
  // for ever (dense_steps runs them).
  const auto dense = testutil::dense_steps(*b->plan);
  EXPECT_EQ(dense[1].size(), 7u);  // (the kStepExt folded into its calloc)

  // Thread 4's mmap before thread 2 ended: 4 gets a replay thread of its
  // own, and 5 goes after 2.
  write(dir.file("m.hlt"), true);
  auto rm = TraceReader::open(dir.file("m.hlt"));
  EXPECT_EQ(threads_at_once(*rm), 4u);
  EXPECT_EQ(fold_threads(*rm, 0), (Fold{{0}, {1, 3}, {2, 5}, {4}}));
  auto bm = build_from(*rm, PlanOptions{});
  EXPECT_EQ(bm->summary.new_threads, 2u);
  EXPECT_EQ(bm->summary.memory_ops[kStepMap - kStepMap], 1u);

  // thread_ends written after each thread's last record (normalised after
  // the program ran, or no word on it): a thread may have lived on after
  // it, so each runs to the end of the trace: one replay thread each.
  write(dir.file("l.hlt"), false, false);
  auto rl = TraceReader::open(dir.file("l.hlt"));
  EXPECT_EQ(threads_at_once(*rl), 6u);
  EXPECT_EQ(fold_threads(*rl, 0, &sequential), (Fold{{0}, {1}, {2}, {3}, {4}, {5}}));
  EXPECT_FALSE(sequential);
}

// ------------------------------------------------------------ timestamps

// With PlanOptions::times each step carries its recorded time (per replay
// thread, also when folded); without, or on a trace without a clock, the
// plan has no times.
TEST(PlanTimes, StoredOnlyWhenAskedAndRecorded) {
  std::vector<Event> evs = {
      at(ev(Op::thread_start, 0), 5), at(alloc(10, 0), 100),   at(alloc(20, 1), 250),           at(release(1, 1), 400),
      at(lost_ev(3, 0), 450),         at(release(2, 0), 1000), at(ev(Op::thread_end, 1), 1200),
  };
  {
    std::vector<Event> copy = evs;
    PlanOptions opt;
    opt.times = true;
    auto b = build(copy, opt, /*timestamps=*/true);
    EXPECT_TRUE(b->summary.has_times);
    EXPECT_EQ(b->summary.duration_ns, 1200u);
    const MappedPlan& p = *b->plan;
    ASSERT_TRUE(p.has_times());
    ASSERT_EQ(p.threads(), 2u);
    ASSERT_NE(p.times(0), nullptr);
    ASSERT_NE(p.times(1), nullptr);
    ASSERT_EQ(p.step_count(0), 2u);
    ASSERT_EQ(p.step_count(1), 2u);
    EXPECT_EQ(p.times(0)[0], 100u);
    EXPECT_EQ(p.times(0)[1], 1000u);
    EXPECT_EQ(p.times(1)[0], 250u);
    EXPECT_EQ(p.times(1)[1], 400u);
  }
  {
    std::vector<Event> copy = evs;
    PlanOptions opt;
    opt.times = true;
    opt.threads = 1;
    auto b = build(copy, opt, true);
    ASSERT_EQ(b->plan->step_count(0), 4u);
    const uint64_t* t = b->plan->times(0);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(std::vector<uint64_t>(t, t + 4), (std::vector<uint64_t>{100, 250, 400, 1000}));
  }
  {
    std::vector<Event> copy = evs;
    auto b = build(copy, PlanOptions{}, true);
    EXPECT_FALSE(b->summary.has_times);
    EXPECT_EQ(b->summary.duration_ns, 1200u);
    EXPECT_FALSE(b->plan->has_times());
    EXPECT_EQ(b->plan->times(0), nullptr);
    EXPECT_EQ(b->plan->times(1), nullptr);
  }
  {
    std::vector<Event> copy = evs;
    PlanOptions opt;
    opt.times = true;
    auto b = build(copy, opt, /*timestamps=*/false);
    EXPECT_FALSE(b->summary.has_times);
    EXPECT_EQ(b->summary.duration_ns, 0u);
    EXPECT_FALSE(b->plan->has_times());
    EXPECT_EQ(b->plan->times(0), nullptr);
  }
}

// ------------------------------------------------------------ inconsistent traces

// A double free (the writer accepts it: the object exists) names the event,
// its thread, the op and the object.
TEST(PlanErrors, DoubleFree) {
  std::vector<Event> evs = {alloc(8, 0), alloc(8, 3), release(2, 3), release(1, 0), release(2, 3, 0, Op::op_delete)};
  EXPECT_EQ(plan_error(evs), "inconsistent trace: event 4 (thread 3, delete): object 2 was already freed");
  std::vector<Event> evs2 = {alloc(8), release(1), release(1)};
  EXPECT_EQ(plan_error(evs2), "inconsistent trace: event 2 (thread 0, free): object 1 was already freed");
}

// A realloc of an object that a successful realloc already consumed is also
// a use of a dead object; a failed realloc does not consume.
TEST(PlanErrors, UseAfterRealloc) {
  std::vector<Event> evs = {alloc(8), realloc_ev(1, 16), realloc_ev(1, 32)};
  EXPECT_EQ(plan_error(evs), "inconsistent trace: event 2 (thread 0, realloc): object 1 was already freed");
  std::vector<Event> ok = {alloc(8), failed(realloc_ev(1, 16)), realloc_ev(1, 32)};
  EXPECT_EQ(plan_error(ok), "");
}

// A free of an object that does not exist yet. The writer refuses to write
// one, so the trace is written with a legal `old` and the stored value is
// patched in the (uncompressed) chunk, checksums recomputed.
TEST(PlanErrors, FreeOfObjectThatDoesNotExistYet) {
  // malloc (id 1), malloc (id 2), free(1): the old column stores
  // zigzag(ref - old) = zigzag(2 - 1) = 2 for the free; zigzag(2 - 3) = 1
  // makes it free(3).
  std::vector<Event> evs = {alloc(8), alloc(8), release(1)};
  TempDir dir;
  WriterOptions wo;
  wo.codec = trace::kCodecNone;
  trace::testutil::write_trace(dir.file("t.hlt"), evs, wo);
  std::string img = trace::testutil::read_file(dir.file("t.hlt"));

  size_t off = trace::kFileHeaderSize;
  size_t payload = 0;
  while (off + trace::kBlockHeaderSize <= img.size()) {
    uint32_t type, len;
    std::memcpy(&type, img.data() + off, 4);
    std::memcpy(&len, img.data() + off + 4, 4);
    if (type == trace::kBlockChunk) {
      payload = off + trace::kBlockHeaderSize;
      break;
    }
    off += trace::kBlockHeaderSize + len;
  }
  ASSERT_NE(payload, 0u) << "no chunk found";
  uint32_t n;
  std::memcpy(&n, img.data() + payload + 4, 4);
  ASSERT_EQ(n, 3u);
  ASSERT_EQ(uint8_t(img[payload + 56]), trace::kCodecNone);
  const auto* w = reinterpret_cast<const uint8_t*>(img.data() + payload + 64);
  ASSERT_EQ(w[trace::kColOld], 1u);
  const size_t old_at = payload + trace::kChunkHeaderSize + n + n * (w[0] + w[1] + w[2]) + 2;
  ASSERT_EQ(uint8_t(img[old_at]), 2u);
  img[old_at] = 1;
  trace::testutil::repair_checksums(img);

  auto r = TraceReader::from_memory(img, "patched");
  ASSERT_TRUE(r->complete());
  const auto back = trace::testutil::read_all(*r);
  ASSERT_EQ(back.size(), 3u);
  ASSERT_EQ(back[2].old, 3u);
  PlanSummary s;
  try {
    close(build_plan(*r, PlanOptions{}, s));
    FAIL() << "no PlanError";
  } catch (const PlanError& e) {
    EXPECT_STREQ(e.what(), "inconsistent trace: event 2 (thread 0, free): object 3 does not exist yet");
  }
}

// A truncated trace (the writer died before close) may have lost the chunk
// that produced an object: its frees are dropped and its reallocs replayed
// as realloc(NULL) instead of failing; the replay ids of the objects it has
// are dense (1, 2, 3 for trace ids 2, 3, 4).
TEST(PlanErrors, TruncatedTraceDropsConsumesOfLostObjects) {
  TempDir dir;
  const std::string path = dir.file("t.hlt");
  {
    WriterOptions wo;
    wo.chunk_events = 2;
    trace::TraceWriter w(path, wo);
    std::vector<Event> evs = {
        alloc(10, 1),       // id 1, thread 1's chunk never fills: lost
        alloc(20, 0),       // id 2 -> replay 1
        release(1, 0),      // chunk of thread 0 full: written
        realloc_ev(1, 30),  // id 3 -> replay 2
        alloc(5, 0),        // id 4 -> replay 3, chunk full: written
    };
    for (Event& e : evs) w.append(e);
    // No close(): thread 1's open chunk, the index and the footer are lost.
  }
  auto r = TraceReader::open(path);
  ASSERT_FALSE(r->complete());
  auto b = build_from(*r, PlanOptions{});
  const PlanSummary& s = b->summary;
  EXPECT_EQ(s.events, 4u);
  EXPECT_EQ(s.steps, 3u);
  EXPECT_EQ(s.skipped_lost, 1u);
  EXPECT_EQ(s.realloc_of_lost, 1u);
  EXPECT_EQ(s.objects, 3u);
  EXPECT_EQ(s.max_id, 3u);
  EXPECT_EQ(b->plan->max_id(), 3u);
  EXPECT_EQ(s.live_bytes_end, 55u);
  ASSERT_EQ(b->plan->threads(), 1u);
  const std::vector<Step> dense = steps_of(*b->plan, 0);
  const Step* st = dense.data();
  ASSERT_EQ(b->plan->step_count(0), 3u);
  expect_step(st[0], Op::malloc, 0, 1, 0, 20, 0, 0);
  expect_step(st[1], Op::realloc, 0, 2, 0, 30, 0, 1);  // replayed with NULL
  expect_step(st[2], Op::malloc, 0, 3, 0, 5, 0, 2);
  EXPECT_EQ(trace_max_id(b->events), 4u);  // the trace's own ids

  const Expected x = expected_of(b->events, {0, 0});
  expect_steps_eq(steps_of(*b->plan, 0), x.steps.at(0));
  EXPECT_EQ(x.skipped_lost, 1u);
  EXPECT_EQ(x.realloc_of_lost, 1u);
  EXPECT_EQ(x.max_id, 3u);
}

// In a truncated trace with gaps, a failed realloc of a live object takes the
// next dense replay id and the object's later free consumes it, while a
// failed realloc of a lost object is replayed with NULL and produces nothing.
TEST(PlanErrors, TruncatedTraceFailedReallocsTakeDenseIds) {
  TempDir dir;
  const std::string path = dir.file("t.hlt");
  {
    WriterOptions wo;
    wo.chunk_events = 2;
    trace::TraceWriter w(path, wo);
    std::vector<Event> evs = {
        alloc(10, 1),                        // id 1, lost with thread 1's open chunk
        alloc(20, 0),                        // id 2 -> replay 1
        failed(realloc_ev(2, 1u << 30, 0)),  // keeps 2 -> replay 2 (old 1); written
        release(2, 0),                       // free of replay 2
        failed(realloc_ev(1, 1u << 30, 0)),  // lost object: realloc(NULL), no id; written
        alloc(5, 0),                         // id 3 -> replay 3
        release(3, 0),                       // free of replay 3; written
    };
    for (Event& e : evs) w.append(e);
    // No close().
  }
  auto r = TraceReader::open(path);
  ASSERT_FALSE(r->complete());
  auto b = build_from(*r, PlanOptions{});
  const PlanSummary& s = b->summary;
  EXPECT_EQ(s.events, 6u);
  EXPECT_EQ(s.steps, 7u);  // 6 calls, the failed realloc of 2 after a kStepExt
  EXPECT_EQ(s.skipped_lost, 0u);
  EXPECT_EQ(s.realloc_of_lost, 1u);
  EXPECT_EQ(s.objects, 2u);
  EXPECT_EQ(s.max_id, 3u);
  EXPECT_EQ(b->plan->max_id(), 3u);
  EXPECT_EQ(s.live_bytes_peak, 20u);
  EXPECT_EQ(s.live_bytes_end, 0u);
  ASSERT_EQ(b->plan->threads(), 1u);
  ASSERT_EQ(b->plan->step_count(0), 7u);
  const std::vector<Step> dense = steps_of(*b->plan, 0);
  const Step* st = dense.data();
  expect_step(st[0], Op::malloc, 0, 1, 0, 20, 0, 0);
  expect_step(st[1], Op::realloc, kFailedFlags, 2, 1, 1u << 30, 0, 1);
  expect_step(st[2], Op::free, 0, 0, 2, 0, 0, 2);
  expect_step(st[3], Op::realloc, kFailedFlags, 0, 0, 1u << 30, 0, 3);
  expect_step(st[4], Op::malloc, 0, 3, 0, 5, 0, 4);
  expect_step(st[5], Op::free, 0, 0, 3, 0, 0, 5);

  const Expected x = expected_of(b->events, {0, 0});
  expect_steps_eq(steps_of(*b->plan, 0), x.steps.at(0));
  EXPECT_EQ(x.max_id, 3u);
  EXPECT_EQ(x.objects, 2u);
  EXPECT_EQ(x.realloc_of_lost, 1u);
}

// ------------------------------------------------------------ table slots

// Objects made on one thread and freed on another, `lag` objects later:
// the consumer's freed slots go back to the producer in batches, each with
// one handoff step, so the table follows the live objects (at most lag + 2
// batches per thread + one), not the 20,000 the trace makes.
std::vector<Event> producer_consumer_events(uint64_t objects, uint64_t lag) {
  std::vector<Event> evs;
  for (uint64_t i = 1; i <= objects + lag; ++i) {
    if (i <= objects) evs.push_back(alloc(16 + i % 64, 0));
    if (i > lag) evs.push_back(release(i - lag, 1));
  }
  return evs;
}

TEST(PlanSlots, FreedSlotsGoBackToTheProducerInBatches) {
  std::vector<Event> evs = producer_consumer_events(20000, 100);
  auto b = build(evs);
  const PlanSummary& s = b->summary;
  EXPECT_EQ(s.objects, 20000u);
  EXPECT_EQ(s.max_id, 20000u);
  EXPECT_EQ(b->plan->max_id(), 20000u);
  EXPECT_LE(s.slots, 100 + 2 * 2 * 1024 + 1) << "the table grows with the trace";
  EXPECT_EQ(b->plan->slots(), s.slots);
  EXPECT_GT(s.handoffs, 0u);
  EXPECT_EQ(s.slots_retired, 0u);
  EXPECT_EQ(s.steps, 40000u + s.handoffs);
  const Expected x = expected_of(b->events, {0, 1});
  // Every consume gets its object, whichever way the threads interleave.
  for (unsigned seed : {0u, 1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto dense = testutil::dense_steps(*b->plan, &x.steps, seed);
    for (uint32_t k = 0; k < 2; ++k) expect_steps_eq(dense.at(k), x.steps[k]);
  }
}

// One slot reused over and over: its generation reaches the limit and the
// slot is retired, the next object takes a fresh one.
TEST(PlanSlots, ASlotIsRetiredAtItsLastGeneration) {
  std::vector<Event> evs;
  for (uint64_t i = 1; i <= kMaxGeneration + 10; ++i) {
    evs.push_back(alloc(32));
    evs.push_back(release(i));
  }
  auto b = build(evs);
  EXPECT_EQ(b->summary.slots, 2u);
  EXPECT_EQ(b->summary.slots_retired, 1u);
  EXPECT_EQ(b->summary.handoffs, 0u);
  const PlanStep* st = b->plan->steps(0);  // (malloc and free: a PlanStep each)
  EXPECT_EQ(st[0].ref(), make_ref(1, 1));
  EXPECT_EQ(st[2 * (kMaxGeneration - 1)].ref(), make_ref(1, kMaxGeneration));
  EXPECT_EQ(st[2 * kMaxGeneration].ref(), make_ref(2, 1));
  const Expected x = expected_of(b->events, {0});
  expect_steps_eq(steps_of(*b->plan, 0), x.steps[0]);
}

// ------------------------------------------------------------ the plan's disk space

// Disk space is reserved first for the plan at its smallest (a PlanStep a
// call): a file system without room for that is refused before anything is
// built. The calls that need a kStepExt take the rest as they are written:
// a file system that fills then gives a one-line error too. (A 16 MiB
// tmpfs; realloc(p, n) chains: 24 bytes a call reserved, 48 written; and
// the checksums, 1/512 of the arrays at most.)
TEST(PlanDisk, TooSmallForTheReservationOrForTheWholePlan) {
  const auto plan_error = [](uint64_t reallocs) {
    TempDir dir;
    trace::testutil::SmallFs fs(dir.file("small"));
    if (!fs.why_not.empty()) return "skip: " + fs.why_not;
    std::vector<Event> evs = {alloc(8)};
    for (uint64_t i = 1; i <= reallocs; ++i) evs.push_back(realloc_ev(i, 8 + i % 64));
    const std::string path = dir.file("t.hlt");
    trace::testutil::write_trace(path, evs, WriterOptions{});
    auto r = TraceReader::open(path);
    PlanOptions opt;
    opt.live = true;
    const int fd = ::open((fs.path + "/plan").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return std::string("cannot create the plan file");
    PlanSummary s;
    std::string err;
    try {
      close(build_plan(*r, opt, s, fd));
    } catch (const PlanError& e) {
      err = e.what();
    }
    return err;
  };
  const std::string fits = plan_error(200000);  // 4.8 MB reserved, 9.6 MB written
  if (fits.rfind("skip: ", 0) == 0) GTEST_SKIP() << fits.substr(6);
  EXPECT_EQ(fits, "");
  EXPECT_EQ(plan_error(400000),  // 9.6 MB, 19.2 MB
            "writing the replay plan: No space left on device (its reallocs, callocs and aligned calls took more "
            "than the room reserved for it first: set HEAPLAB_PLAN_DIR to a file system with more room)");
  EXPECT_EQ(plan_error(800000), "reserving disk space for the replay plan (19254184 bytes): No space left on device");
}

// ------------------------------------------------------------ not a plan

int memfd_with(const std::string& bytes) {
  const int fd = memfd_create("not-a-plan", MFD_CLOEXEC);
  if (fd < 0) return fd;
  if (!bytes.empty() && write(fd, bytes.data(), bytes.size()) != ssize_t(bytes.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string mapped_plan_error(const std::string& bytes) {
  const int fd = memfd_with(bytes);
  if (fd < 0) return "memfd failed";
  std::string what;
  try {
    MappedPlan p(fd);
  } catch (const PlanError& e) {
    what = e.what();
  }
  close(fd);
  return what;
}

// MappedPlan refuses files that are not plans, with a message saying why.
TEST(PlanMapped, RejectsWhatIsNotAPlan) {
  EXPECT_EQ(mapped_plan_error(std::string(4096, '\xab')), "plan: not a heaplab replay plan of version 9");
  EXPECT_EQ(mapped_plan_error(std::string(100, '\xab')), "plan: too short to be a replay plan");
  EXPECT_EQ(mapped_plan_error(""), "plan: too short to be a replay plan");
}

// A real plan whose version or sizes were damaged is refused too.
TEST(PlanMapped, RejectsDamagedPlan) {
  std::vector<Event> evs = {alloc(8), alloc(16), release(1), release(2)};
  auto b = build(evs);
  std::string img(b->plan->mapped_bytes(), '\0');
  ASSERT_EQ(pread(b->fd, img.data(), img.size(), 0), ssize_t(img.size()));
  EXPECT_EQ(mapped_plan_error(img), "");  // an intact copy maps

  std::string bad_version = img;
  bad_version[8] = 1;  // version, after the 8-byte magic: an older layout
  EXPECT_EQ(mapped_plan_error(bad_version), "plan: not a heaplab replay plan of version 9");

  std::string bad_peak = img;  // the live peak's step (after the ops and the peak value) past the thread's end
  const uint64_t step = 4;     // (after magic, version, threads, max_id, slots, steps, times, live: 56 bytes)
  std::memcpy(bad_peak.data() + 56 + 8 * trace::kOpCount + 8, &step, sizeof step);
  EXPECT_EQ(mapped_plan_error(bad_peak), "plan: the live peak's step is not in the plan");

  std::string cut = img.substr(0, 4096);  // the header page only: steps lie past the end
  EXPECT_EQ(mapped_plan_error(cut), "plan: thread 0's arrays lie past the end");
}

// The checksums (plan.h, plan_chunk_sum): every chunk of 512 entries of each
// array, the last one part full, is compared when a kept plan is found
// (plan_sums_damage, on one thread or two alike); a change in any array
// that leaves every step valid is found, and named by its steps.
TEST(PlanSums, EveryArraysChunksAreChecked) {
  std::vector<Event> evs;
  for (uint64_t i = 1; i <= 700; ++i) {
    evs.push_back(alloc(16 + i, 0, 1000 + 2 * i));
    evs.push_back(release(i, 0, 1001 + 2 * i));
  }
  auto b = build(evs, PlanOptions{0, true, true}, true);
  ASSERT_EQ(b->plan->step_count(0), 1400u);  // chunks 0, 1 and 2 (376 steps)
  ASSERT_TRUE(b->plan->has_times() && b->plan->has_live());
  const auto array_of = [&](const MappedPlan& p, PlanArray a) {
    return a == PlanArray::steps   ? reinterpret_cast<const char*>(p.steps(0))
           : a == PlanArray::times ? reinterpret_cast<const char*>(p.times(0))
                                   : reinterpret_cast<const char*>(p.live(0));
  };
  for (PlanArray a : {PlanArray::steps, PlanArray::times, PlanArray::live}) {
    const uint64_t* sums = b->plan->sums(0, a);
    ASSERT_NE(sums, nullptr);
    const size_t width = a == PlanArray::steps ? 16 : 8;
    EXPECT_EQ(sums[2], plan_chunk_sum(array_of(*b->plan, a) + 1024 * width, 376 * width, 0, 2, a));
  }
  std::string img(b->plan->mapped_bytes(), '\0');
  ASSERT_EQ(pread(b->fd, img.data(), img.size(), 0), ssize_t(img.size()));
  // What the check says of the plan `bytes`, on one thread and on two (the same).
  const auto damage_of = [](const std::string& bytes) {
    const int fd = memfd_with(bytes);
    std::string one, two;
    {
      MappedPlan p(fd);
      one = plan_sums_damage(fd, p, 1);
      two = plan_sums_damage(fd, p, 2);
    }
    close(fd);
    EXPECT_EQ(one, two);
    return one;
  };
  EXPECT_EQ(damage_of(img), "");
  const auto offset_of = [&](PlanArray a, uint64_t entry) {
    const size_t width = a == PlanArray::steps ? 16 : 8;
    return size_t(array_of(*b->plan, a) + entry * width + (a == PlanArray::steps ? 8 : 0) -
                  static_cast<const char*>(b->plan->base()));
  };
  const struct {
    PlanArray array;
    uint64_t entry;
    std::string said;
  } cases[] = {
      {PlanArray::steps, 0, "steps 0 to 511 do not match their checksum (the steps"},
      {PlanArray::steps, 1399, "steps 1024 to 1399 do not match their checksum (the steps"},
      {PlanArray::times, 600, "steps 512 to 1023 do not match their checksum (their recorded times"},
      {PlanArray::live, 1100, "steps 1024 to 1399 do not match their checksum (their live bytes"},
  };
  const std::string changed = ": the plan's file was changed after it was built)";
  for (const auto& c : cases) {
    std::string bad = img;
    bad[offset_of(c.array, c.entry)] ^= 1;  // a size, a time, a live sum one off: still a valid step
    EXPECT_EQ(damage_of(bad), "plan: thread 0 " + c.said + changed);
  }
  // Two places: the first named (the steps before the times).
  std::string two = img;
  two[offset_of(PlanArray::times, 0)] ^= 1;
  two[offset_of(PlanArray::steps, 1399)] ^= 1;
  EXPECT_EQ(damage_of(two), "plan: thread 0 steps 1024 to 1399 do not match their checksum (the steps" + changed);
  // A checksum itself changed.
  std::string bad = img;
  bad[size_t(reinterpret_cast<const char*>(b->plan->sums(0, PlanArray::live) + 1) -
             static_cast<const char*>(b->plan->base()))] ^= 1;
  EXPECT_EQ(damage_of(bad), "plan: thread 0 steps 512 to 1023 do not match their checksum (their live bytes" + changed);
  // A plan cut short after it was mapped: the steps it lost cannot be read
  // (a plan built again, not SIGBUS: it is read with pread).
  const int fd = memfd_with(img);
  {
    MappedPlan p(fd);
    ASSERT_EQ(ftruncate(fd, off_t(offset_of(PlanArray::steps, 1100))), 0);
    EXPECT_EQ(plan_sums_damage(fd, p, 2), "plan: thread 0 steps 0 to 1399 cannot be read: the file ends before it");
  }
  close(fd);
}

// A plan written in many buffers (more than 32,768 steps a thread, three
// threads: the builder's buffers of 32,768 entries, each a run of whole
// chunks) and checked in many pieces (512 chunks each, on two threads):
// intact, every chunk matches; a step changed past the first buffers and
// pieces is found and named.
TEST(PlanSums, ManyBuffersAndPieces) {
  std::vector<Event> evs;
  uint64_t id = 0, time = 1000;
  for (int i = 0; i < 450000; ++i) {
    const uint32_t t = uint32_t(i % 3);
    evs.push_back(alloc(16 + i % 200, t, time++));
    evs.push_back(release(++id, t, time++));
  }
  auto b = build(evs, PlanOptions{0, true, true}, true);
  ASSERT_EQ(b->plan->threads(), 3u);
  ASSERT_GT(b->plan->step_count(2), 512u * 512u);  // more than one piece
  EXPECT_EQ(plan_sums_damage(b->fd, *b->plan, 2), "");
  std::string img(b->plan->mapped_bytes(), '\0');
  ASSERT_EQ(pread(b->fd, img.data(), img.size(), 0), ssize_t(img.size()));
  const uint64_t step = 512 * 512 + 700;  // in the second piece, past seven buffers
  img[size_t(reinterpret_cast<const char*>(b->plan->steps(2) + step) - static_cast<const char*>(b->plan->base()) +
             8)] ^= 4;
  const int fd = memfd_with(img);
  {
    MappedPlan p(fd);
    EXPECT_EQ(plan_sums_damage(fd, p, 2),
              "plan: thread 2 steps 262656 to 263167 do not match their checksum (the steps: the plan's file was "
              "changed after it was built)");
  }
  close(fd);
}

}  // namespace
}  // namespace heaplab::replay

namespace heaplab::replay {
namespace {

// PlanOptions::live stores each replay thread's running sum of requested
// bytes produced minus consumed: for one thread, its maximum is the trace's
// live-bytes peak and its last value the bytes live at the end; summed over
// threads at their ends, the bytes live at the end.
TEST(PlanLive, RunningLiveBytesPerThread) {
  std::vector<Event> evs = {alloc(100), alloc(50), release(1), alloc(30)};
  {
    auto b = build(evs, PlanOptions{0, false, true});
    ASSERT_TRUE(b->plan->has_live());
    const int64_t* l = b->plan->live(0);
    EXPECT_EQ(std::vector<int64_t>(l, l + 4), (std::vector<int64_t>{100, 150, 50, 80}));
    EXPECT_EQ(b->summary.live_bytes_peak, 150u);
    EXPECT_EQ(b->summary.live_bytes_end, 80u);
    // The peak is first reached by the second call: the replayer's snapshot
    // goes right after it.
    EXPECT_EQ(b->plan->peak_thread(), 0u);
    EXPECT_EQ(b->plan->peak_step(), 1u);
    EXPECT_EQ(b->plan->live_bytes_peak(), 150u);
  }
  {
    auto b = build(evs);
    EXPECT_FALSE(b->plan->has_live());
    EXPECT_EQ(b->plan->live(0), nullptr);
  }
  // Two threads, a cross-thread free: thread 1's sum goes negative.
  std::vector<Event> two = {alloc(100), alloc(40), release(1), alloc(7)};
  two[1].thread = 1;
  two[2].thread = 1;  // thread 1 frees thread 0's object
  auto b = build(two, PlanOptions{0, false, true});
  ASSERT_EQ(b->plan->threads(), 2u);
  const int64_t* t0 = b->plan->live(0);
  const int64_t* t1 = b->plan->live(1);
  EXPECT_EQ(std::vector<int64_t>(t0, t0 + 2), (std::vector<int64_t>{100, 107}));
  EXPECT_EQ(std::vector<int64_t>(t1, t1 + 2), (std::vector<int64_t>{40, -60}));
  EXPECT_EQ(uint64_t(t0[1] + t1[1]), b->summary.live_bytes_end);  // 47
  // 140 live after thread 1's first call, in trace order.
  EXPECT_EQ(b->plan->peak_thread(), 1u);
  EXPECT_EQ(b->plan->peak_step(), 0u);
  EXPECT_EQ(b->plan->live_bytes_peak(), 140u);
  // Nothing ever live (a NULL result only): no peak.
  std::vector<Event> nothing = {failed(alloc(uint64_t{1} << 40))};
  auto none = build(nothing, PlanOptions{0, false, true});
  EXPECT_EQ(none->plan->peak_step(), kNoPeak);
}

// The live peak an importer's writer states (WriterOptions::count_heap_peak,
// the metadata's capture.heap_live_peak_bytes, which refuses a replay before
// its build) is the one plan building counts, on random valid traces: every
// op, failed reallocs that keep their object, realloc(p, 0) returning NULL,
// sizes near 2^64 (the sum saturated) and none (six traces' peaks below
// 2^64), cross-thread frees, and objects live long after 2^18
// others were made (the writer's table past its ring).
TEST(PlanLive, TheWritersPeakIsThePlans) {
  int unsaturated = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(seed);
    trace::testutil::GenOptions g;
    g.threads = uint32_t(1 + seed % 4);
    g.max_live = seed % 3 == 0 ? 100000 : 64;
    std::vector<Event> evs = trace::testutil::generate(seed, seed % 3 == 0 ? 600000 : 20000, g);
    // (Sizes near 2^64 saturate the sum at once: on even seeds, none.)
    if (seed % 2 == 0)
      for (Event& e : evs) {
        if (e.size > (uint64_t{1} << 32)) e.size = e.size % 65536;
        if (e.count > (uint64_t{1} << 32)) e.count = e.count % 64;
      }
    TempDir dir;
    const std::string path = dir.file("t.hlt");
    WriterOptions wo;
    wo.count_heap_peak = true;
    trace::TraceWriter w(path, wo);
    for (Event e : evs) w.append(e);
    w.close();
    auto r = TraceReader::open(path);
    PlanSummary s;
    close(build_plan(*r, PlanOptions{}, s));
    EXPECT_GT(s.live_bytes_peak, 0u);
    EXPECT_EQ(w.heap_live_peak(), s.live_bytes_peak);
    // (The object table has a slot for each object live at once, at least.)
    EXPECT_GT(w.live_objects_peak(), 0u);
    EXPECT_LE(w.live_objects_peak(), s.slots);
    unsaturated += s.live_bytes_peak < UINT64_MAX;
  }
  EXPECT_EQ(unsaturated, 6);
}

// A trace of `pairs` malloc and free pairs in `dir`, its plan built by
// `store` and kept under `id`: the plan's path and the build's descriptor
// (still open; -1 and no path if it was not kept).
std::pair<std::string, int> kept_plan_of_pairs(const TempDir& dir, const PlanStore& store, const std::string& id,
                                               uint64_t pairs, PlanSummary& s) {
  std::vector<Event> evs;
  for (uint64_t i = 1; i <= pairs; ++i) {
    evs.push_back(alloc(16));
    evs.push_back(release(i));
  }
  const std::string path = dir.file("t.hlt");
  trace::testutil::write_trace(path, evs, WriterOptions{});
  auto r = TraceReader::open(path);
  bool kept = false;
  std::string where;
  const int fd = store.build(*r, PlanOptions{}, id, s, kept, where);
  std::string plan;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("plans")))
    if (e.path().extension() == ".plan") plan = e.path().string();
  if (!kept || plan.empty()) {
    close(fd);
    return {"", -1};
  }
  return {plan, fd};
}

// A kept plan this process cannot map (an address-space limit) is not found,
// and left in place: the limit is the process's trouble, not the plan's
// (before, it was taken as damaged and removed). In a child process with
// RLIMIT_AS at what it uses now; not under the sanitizers, whose shadow
// memory such a limit breaks.
TEST(PlanStore, APlanThatCannotBeMappedHereIsLeft) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "RLIMIT_AS and the sanitizers' shadow memory do not mix";
#else
  TempDir dir;
  const PlanStore store(dir.file("plans"));
  PlanSummary s;
  const auto [plan, built] = kept_plan_of_pairs(dir, store, "00000000000000aa", 200000, s);
  ASSERT_GE(built, 0) << "not kept";
  close(built);
  ASSERT_GT(std::filesystem::file_size(plan), size_t{4} << 20);  // (more than the child may map)
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // What the process maps now, and 1 MiB more.
    uint64_t vm_kib = 0;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmSize:", 0) == 0) vm_kib = std::strtoull(line.c_str() + 7, nullptr, 10);
    const rlimit lim{(vm_kib + 1024) << 10, (vm_kib + 1024) << 10};
    if (vm_kib == 0 || setrlimit(RLIMIT_AS, &lim) != 0) _exit(3);
    PlanSummary found;
    const int fd = store.find("00000000000000aa", PlanOptions{}, found);
    _exit(fd == -1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "found, though it could not be mapped";
  EXPECT_TRUE(std::filesystem::exists(plan)) << "a plan this process could not map was removed";
  PlanSummary found;
  const int fd = store.find("00000000000000aa", PlanOptions{}, found);  // (here it maps)
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
#endif
}

// A kept plan is held with a shared flock by the command that built or
// found it, until that command closes it: another command's look
// (LOCK_EX|LOCK_NB) finds it in use meanwhile, and free once it is closed.
// find() waits out another command's look at the plan, and does not take
// one that command removed meanwhile.
TEST(PlanStore, AKeptPlanIsLockedWhileItIsUsed) {
  TempDir dir;
  const PlanStore store(dir.file("plans"));
  PlanSummary s;
  const auto held = [&](const std::string& plan) {
    const int fd = open(plan.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << plan;
    const bool locked = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return locked;
  };
  const auto [plan, built] = kept_plan_of_pairs(dir, store, "0123456789abcdef", 100, s);
  ASSERT_GE(built, 0) << "not kept";
  EXPECT_TRUE(held(plan)) << "the plan just built and kept";
  close(built);
  EXPECT_FALSE(held(plan));
  PlanSummary found;
  const int fd = store.find("0123456789abcdef", PlanOptions{}, found);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(found.steps, s.steps);
  EXPECT_TRUE(held(plan)) << "the plan found";
  const int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // (a replayer's inherited copy)
  close(fd);
  EXPECT_TRUE(held(plan)) << "while a copy of the descriptor is open";
  close(dup);
  EXPECT_FALSE(held(plan));
  // Another command's look at it (an exclusive lock for a moment) is
  // waited out, and the plan found; one that removes it meanwhile leaves
  // find() with a file no longer named: not found. (find() has opened the
  // plan by the time the lock is let go: its wait is 100 tries 1 ms apart.)
  for (const bool removed : {false, true}) {
    SCOPED_TRACE(removed);
    const int other = open(plan.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_EQ(flock(other, LOCK_EX | LOCK_NB), 0);
    std::thread look([&] {
      usleep(5000);
      if (removed) std::filesystem::remove(plan);
      close(other);
    });
    const int again = store.find("0123456789abcdef", PlanOptions{}, found);
    look.join();
    EXPECT_EQ(again >= 0, !removed);
    if (again >= 0) close(again);
  }
  EXPECT_EQ(store.find("0123456789abcdef", PlanOptions{}, found), -1);  // (gone)
}

}  // namespace
}  // namespace heaplab::replay
