// Tests of the raw capture reader (RawFile, RawThreadCursor) and of the
// normaliser, over raw files built byte by byte as the shim lays them out
// (capture/shim/raw_format.h): the normalised trace is read back and every
// event compared exactly, with the report's counters.
#include "capture/normalise/normalise.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/normalise/memory_map.h"
#include "capture/normalise/memory_sorter.h"
#include "capture/normalise/raw_reader.h"
#include "capture/shim/raw_format.h"

namespace heaplab::trace {
// Readable failures for event comparisons.
void PrintTo(const Event& e, std::ostream* os) {
  *os << "{seq " << e.seq << " t" << e.thread << " @" << e.time << " " << op_name(e.op);
  if (e.id) *os << " id " << e.id;
  if (e.old) *os << " old " << e.old;
  if (e.size) *os << " size " << e.size;
  if (e.align) *os << " align " << e.align;
  if (e.count) *os << " count " << e.count;
  if (e.flags) *os << " flags " << unsigned(e.flags);
  *os << "}";
}
}  // namespace heaplab::trace

namespace heaplab::normalise {
namespace {

using trace::Event;
using trace::Op;
using trace::testutil::TempDir;

constexpr uint64_t kStart = 1000;  // header start_ticks in most tests

// ---------------------------------------------------------------- raw builder

constexpr uint32_t op(Op o) { return uint32_t(o); }

raw::Record rec(uint32_t o, uint64_t ticks, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0) {
  return raw::Record{raw::record_head(o, ticks), a, b, c};
}
raw::Record rec(Op o, uint64_t ticks, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0) {
  return rec(op(o), ticks, a, b, c);
}
raw::Record hole() { return raw::Record{0, 0, 0, 0}; }

struct Block {
  uint32_t magic = raw::kBlockMagic;
  uint32_t thread = 0;
  uint64_t seq = 0;
  uint64_t tid = 0;
  std::string name;
  std::vector<raw::Record> records;  // from the block's first record slot; the rest is zero

  std::string bytes() const {
    std::string out(raw::kBlockSize, '\0');
    raw::BlockHeader h{};
    h.magic = magic;
    h.thread = thread;
    h.thread_block_seq = seq;
    h.tid = tid;
    std::memcpy(h.name, name.data(), std::min(name.size(), sizeof h.name));
    std::memcpy(out.data(), &h, sizeof h);
    if (records.size() > raw::kRecordsPerBlock) throw std::runtime_error("too many records for a block");
    if (!records.empty())
      std::memcpy(out.data() + raw::kBlockHeaderSize, records.data(), records.size() * sizeof(raw::Record));
    return out;
  }
};

Block block(uint32_t thread, uint64_t seq, std::vector<raw::Record> records, uint64_t tid = 0) {
  Block b;
  b.thread = thread;
  b.seq = seq;
  b.tid = tid ? tid : 100 + thread;
  b.name = "thread" + std::to_string(thread);
  b.records = std::move(records);
  return b;
}

// A raw capture: the header, the mapped current block of each thread slot
// (nullopt: all zero), and the appended blocks.
struct Capture {
  // FileHeader fields
  char magic[8] = {'H', 'L', 'R', 'A', 'W', 'C', 'A', 'P'};
  uint32_t version = raw::kVersion;
  uint32_t header_size = uint32_t(raw::kBlockSize);
  uint32_t block_size = uint32_t(raw::kBlockSize);
  uint32_t record_size = uint32_t(raw::kRecordSize);
  uint32_t clock = raw::kClockMonotonic;
  uint64_t start_ticks = kStart;
  uint64_t start_mono_ns = 0;
  uint64_t end_ticks = 0, end_mono_ns = 0;
  uint32_t flags = raw::kFlagCleanExit;
  uint64_t event_cost_x1024 = 0, timer_overhead = 0;
  uint64_t consumed_blocks = 0;         // by a live normaliser
  std::optional<uint32_t> next_thread;  // default: slots.size()
  uint32_t threads = 0;                 // threads counted (0: a shim before that field)

  std::vector<std::optional<Block>> slots;  // mapped blocks, by slot
  std::vector<Block> appended;              // .blocks, in file order
  std::string appended_tail;                // bytes after the whole appended blocks
  bool blocks_file = true;                  // write .blocks (when it has any content)

  // Mapped block of `slot` (grows the slot list).
  Capture& map(uint32_t slot, Block b) {
    if (slots.size() <= slot) slots.resize(slot + 1);
    slots[slot] = std::move(b);
    return *this;
  }
  // A thread whose records all are in its mapped block (seq 0).
  Capture& thread(uint32_t slot, std::vector<raw::Record> records) {
    return map(slot, block(slot, 0, std::move(records)));
  }

  std::string header_bytes() const {
    auto h = std::make_unique<raw::FileHeader>();  // zero
    std::memcpy(h->magic, magic, sizeof h->magic);
    h->version = version;
    h->header_size = header_size;
    h->block_size = block_size;
    h->record_size = record_size;
    h->pid = 4321;
    h->ppid = 1;
    h->clock = clock;
    h->start_ticks = start_ticks;
    h->start_mono_ns = start_mono_ns;
    h->start_real_ns = 1700000000000000000ull;
    h->end_ticks = end_ticks;
    h->end_mono_ns = end_mono_ns;
    h->data_blocks = appended.size();
    h->next_thread = next_thread ? *next_thread : uint32_t(slots.size());
    h->threads = threads;
    h->flags = flags;
    h->event_cost_x1024 = event_cost_x1024;
    h->timer_overhead = timer_overhead;
    h->consumed_blocks = consumed_blocks;
    static const char kCmd[] = "prog\0arg1";
    std::memcpy(h->cmdline, kCmd, sizeof kCmd - 1);
    h->cmdline_len = sizeof kCmd - 1;
    static const char kExe[] = "/usr/bin/prog";
    std::memcpy(h->exe, kExe, sizeof kExe - 1);
    h->exe_len = sizeof kExe - 1;
    std::string out(raw::kBlockSize, '\0');
    std::memcpy(out.data(), h.get(), sizeof *h);
    return out;
  }

  std::string ring_bytes() const {
    std::string out = header_bytes();
    for (const auto& b : slots) out += b ? b->bytes() : std::string(raw::kBlockSize, '\0');
    return out;
  }

  std::string blocks_bytes() const {
    std::string out;
    for (const Block& b : appended) out += b.bytes();
    return out + appended_tail;
  }

  // Writes DIR/4321.0.hlraw (and .blocks); returns its path.
  std::string write(const TempDir& dir) const {
    std::string path = dir.file("4321.0.hlraw");
    trace::testutil::write_file(path, ring_bytes());
    std::string blocks = blocks_bytes();
    if (blocks_file && !blocks.empty()) trace::testutil::write_file(path + ".blocks", blocks);
    return path;
  }
};

// ------------------------------------------------------------------- running

struct Result {
  NormaliseReport rep;
  std::vector<Event> events;
  std::unique_ptr<trace::TraceReader> reader;
};

Result run(const Capture& c, const TempDir& dir, const NormaliseOptions& opt = {}) {
  std::string path = c.write(dir);
  RawFile f(path);
  Result r;
  r.rep = normalise(f, dir.file("out.hlt"), opt);
  r.reader = trace::TraceReader::open(dir.file("out.hlt"));
  r.events = trace::testutil::read_all(*r.reader);
  return r;
}

// An expected event.
struct X {
  Event e;
  X(Op o, uint64_t time, uint32_t thread = 0) {
    e.op = o;
    e.time = time;
    e.thread = thread;
  }
  X& id(uint64_t v) {
    e.id = v;
    return *this;
  }
  X& old(uint64_t v) {
    e.old = v;
    return *this;
  }
  X& size(uint64_t v) {
    e.size = v;
    return *this;
  }
  X& align(uint64_t v) {
    e.align = v;
    return *this;
  }
  X& count(uint64_t v) {
    e.count = v;
    return *this;
  }
  X& flags(uint8_t v) {
    e.flags = v;
    return *this;
  }
  operator Event() const { return e; }
};

std::string dump(const std::vector<Event>& events) {
  std::string s;
  for (const Event& e : events) s += "\n  " + testing::PrintToString(e);
  return s;
}

// Compares the whole trace; seq is the position.
void expect_events(const std::vector<Event>& got, std::vector<Event> want) {
  for (size_t i = 0; i < want.size(); ++i) want[i].seq = i;
  ASSERT_EQ(got.size(), want.size()) << "got:" << dump(got) << "\nwant:" << dump(want);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "event " << i << "; got:" << dump(got);
}

void expect_times_never_decrease(const std::vector<Event>& events) {
  for (size_t i = 1; i < events.size(); ++i)
    EXPECT_LE(events[i - 1].time, events[i].time) << "event " << i << dump(events);
}

// The report's anomaly counters, all expected zero unless named.
struct Anomalies {
  uint64_t unknown_frees = 0, unknown_reallocs = 0, reused_live = 0, holes = 0, unfinished_reallocs = 0,
           bad_records = 0, reordered = 0, blocks_missing = 0;
};
void expect_anomalies(const NormaliseReport& r, const Anomalies& a) {
  EXPECT_EQ(r.unknown_frees, a.unknown_frees);
  EXPECT_EQ(r.unknown_reallocs, a.unknown_reallocs);
  EXPECT_EQ(r.reused_live, a.reused_live);
  EXPECT_EQ(r.holes, a.holes);
  EXPECT_EQ(r.unfinished_reallocs, a.unfinished_reallocs);
  EXPECT_EQ(r.bad_records, a.bad_records);
  EXPECT_EQ(r.reordered, a.reordered);
  EXPECT_EQ(r.blocks_missing, a.blocks_missing);
}

std::string raw_error(const std::string& path) {
  try {
    RawFile f(path);
  } catch (const RawError& e) {
    return e.what();
  }
  return "(no error)";
}

// Sizes of the malloc events, in trace order.
std::vector<uint64_t> malloc_sizes(const std::vector<Event>& events) {
  std::vector<uint64_t> out;
  for (const Event& e : events)
    if (e.op == Op::malloc) out.push_back(e.size);
  return out;
}

constexpr uint8_t kNull = trace::kNullResult;
constexpr uint8_t kNullFailed = trace::kNullResult | trace::kFailed;

// ===================================================================== 1. one thread

TEST(Normalise, OneThreadExactTrace) {
  TempDir dir;
  Capture c;
  c.thread(0, {
                  rec(Op::malloc, 1010, 0x1000, 16),
                  rec(Op::calloc, 1020, 0x2000, 8, 10),
                  rec(Op::free, 1030, 0x1000),
                  rec(Op::op_new, 1040, 0x3000, 24),
                  rec(Op::op_delete_sized, 1050, 0x3000, 24),
                  rec(Op::posix_memalign, 1060, 0x4000, 100, 64),
                  rec(Op::free, 1070, 0),                       // free(NULL)
                  rec(Op::malloc, 1080, 0, uint64_t{1} << 50),  // failed
                  rec(Op::op_delete_aligned, 1090, 0x4000, 0, 64),
                  rec(Op::free, 1100, 0x2000),
              });
  c.slots[0]->tid = 4242;
  c.slots[0]->name = "main";
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(16),
                              X(Op::calloc, 20).id(2).size(8).count(10),
                              X(Op::free, 30).old(1),
                              X(Op::op_new, 40).id(3).size(24),
                              X(Op::op_delete_sized, 50).old(3).size(24),
                              X(Op::posix_memalign, 60).id(4).size(100).align(64),
                              X(Op::free, 70),
                              X(Op::malloc, 80).size(uint64_t{1} << 50).flags(kNullFailed),
                              X(Op::op_delete_aligned, 90).old(4).align(64),
                              X(Op::free, 100).old(2),
                              X(Op::thread_end, 100),
                          });
  EXPECT_EQ(r.rep.records, 10u);
  EXPECT_EQ(r.rep.calls, 10u);
  EXPECT_EQ(r.rep.events, 12u);
  EXPECT_EQ(r.rep.threads, 1u);
  EXPECT_EQ(r.rep.objects, 4u);
  EXPECT_EQ(r.rep.live_at_end, 0u);
  EXPECT_EQ(r.rep.duration_ns, 90u);
  EXPECT_TRUE(r.rep.clean_exit);
  EXPECT_EQ(r.rep.clock, "monotonic");
  EXPECT_EQ(r.rep.bytes, r.reader->file_size());
  expect_anomalies(r.rep, {});
  EXPECT_TRUE(r.reader->has_time());
  EXPECT_TRUE(r.reader->complete());
  EXPECT_EQ(r.reader->thread_info(0), (trace::ThreadInfo{4242, "main"}));
  auto meta = nlohmann::json::parse(r.reader->metadata());
  EXPECT_EQ(meta["capture"]["pid"], 4321);
  EXPECT_EQ(meta["capture"]["exe"], "/usr/bin/prog");
  EXPECT_EQ(meta["capture"]["records"], 10);
}

// Threads starting together may number past the slots handed out (a thread
// may start in a block the live reader gave back): a number is read up to
// the threads the header counts, and no further than kThreadsPastSlotsMax
// past the slots for a damaged count.
TEST(Normalise, ThreadNumbersPastTheSlotsUpToTheThreadsCounted) {
  static_assert(raw::thread_numbers(2, 0) == 2);
  static_assert(raw::thread_numbers(2, 3) == 3);
  static_assert(raw::thread_numbers(2, 4000000000u) == 2 + raw::kThreadsPastSlotsMax);
  auto capture = [](uint32_t threads, uint32_t past) {
    Capture c;
    c.thread(0, {rec(Op::malloc, 1010, 0x1000, 16)});
    c.map(1, block(past, 0, {rec(Op::malloc, 1020, 0x2000, 32)}));
    c.threads = threads;
    return c;
  };
  {
    TempDir dir;
    Result r = run(capture(3, 2), dir);  // thread 2 in slot 1 of 2
    EXPECT_EQ(r.rep.threads, 2u);
    EXPECT_EQ(r.rep.calls, 2u);
    expect_events(r.events, {
                                X(Op::thread_start, 10),
                                X(Op::malloc, 10).id(1).size(16),
                                X(Op::thread_end, 10),
                                X(Op::thread_start, 20, 1),
                                X(Op::malloc, 20, 1).id(2).size(32),
                                X(Op::thread_end, 20, 1),
                            });
  }
  {
    TempDir dir;
    Result r = run(capture(0, 2), dir);  // no count: numbers below the slots only
    EXPECT_EQ(r.rep.threads, 1u);
    EXPECT_EQ(r.rep.calls, 1u);
  }
  {
    TempDir dir;
    Result r = run(capture(4000000000u, 2 + raw::kThreadsPastSlotsMax), dir);  // a damaged count
    EXPECT_EQ(r.rep.threads, 1u);
    EXPECT_EQ(r.rep.calls, 1u);
  }
}

TEST(Normalise, EveryProducingAndReleasingOpKeepsItsFields) {
  // Ops 0..29 except realloc/reallocarray: each allocation freed by the next
  // release op, fields per raw_format.h.
  TempDir dir;
  std::vector<raw::Record> recs;
  std::vector<Event> want;
  uint64_t t = 1010, id = 0;
  want.push_back(X(Op::thread_start, 10));
  const Op producers[] = {Op::malloc,
                          Op::calloc,
                          Op::memalign,
                          Op::posix_memalign,
                          Op::aligned_alloc,
                          Op::valloc,
                          Op::pvalloc,
                          Op::op_new,
                          Op::op_new_array,
                          Op::op_new_nothrow,
                          Op::op_new_array_nothrow,
                          Op::op_new_aligned,
                          Op::op_new_array_aligned,
                          Op::op_new_aligned_nothrow,
                          Op::op_new_array_aligned_nothrow};
  const Op releasers[] = {Op::free,
                          Op::op_delete,
                          Op::op_delete_array,
                          Op::op_delete_sized,
                          Op::op_delete_array_sized,
                          Op::op_delete_aligned,
                          Op::op_delete_array_aligned,
                          Op::op_delete_sized_aligned,
                          Op::op_delete_array_sized_aligned,
                          Op::op_delete_nothrow,
                          Op::op_delete_array_nothrow,
                          Op::op_delete_aligned_nothrow,
                          Op::op_delete_array_aligned_nothrow,
                          Op::free,
                          Op::free};
  for (size_t i = 0; i < std::size(producers); ++i) {
    Op p = producers[i], q = releasers[i];
    uint64_t addr = 0x10000 + i * 0x100, size = 10 + i, extra = 16u << i;
    recs.push_back(rec(p, t, addr, size, extra));
    X e(p, t - kStart);
    e.id(++id).size(size);
    if (trace::op_has(p, trace::kAlign)) e.align(extra);
    if (trace::op_has(p, trace::kCount)) e.count(extra);
    want.push_back(e);
    t += 10;
    recs.push_back(rec(q, t, addr, size + 1, extra * 2));
    X f(q, t - kStart);
    f.old(id);
    if (trace::op_has(q, trace::kSize)) f.size(size + 1);
    if (trace::op_has(q, trace::kAlign)) f.align(extra * 2);
    want.push_back(f);
    t += 10;
  }
  want.push_back(X(Op::thread_end, t - 10 - kStart));
  Capture c;
  c.thread(0, recs);
  Result r = run(c, dir);
  expect_events(r.events, want);
  expect_anomalies(r.rep, {});
  EXPECT_EQ(r.rep.calls, recs.size());
}

TEST(Normalise, UnknownRecordOpsAreCountedAndSkipped) {
  TempDir dir;
  Capture c;
  c.thread(0, {
                  rec(Op::malloc, 1010, 0x1000, 16),
                  rec(uint32_t(Op::thread_start), 1020, 0x2000, 1),  // not a raw record op
                  rec(35u, 1030, 0x3000, 2),
                  rec(99u, 1040, 0x4000, 3),
                  rec(Op::free, 1050, 0x1000),
              });
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(16),
                              X(Op::free, 50).old(1),
                              X(Op::thread_end, 50),
                          });
  expect_anomalies(r.rep, {.bad_records = 3});
  EXPECT_EQ(r.rep.records, 5u);
  EXPECT_EQ(r.rep.calls, 2u);
}

// The native timeline: each record's time less the shim's cost on its
// thread so far: the calibrated cost of every earlier record (5 ns here) and
// the work it timed (kRawOverhead: 100 ns in all by the third record).
TEST(Normalise, ShimCostIsTakenOffTheTimeline) {
  TempDir dir;
  Capture c;
  c.event_cost_x1024 = 5 * 1024;
  c.thread(0, {
                  rec(Op::malloc, 1010, 0x1000, 16),
                  rec(uint32_t(raw::kRawOverhead), 1100, 100),
                  rec(Op::free, 1200, 0x1000),
              });
  NormaliseOptions opt;
  opt.capture_metadata["wall_ns"] = 1000;
  Result r = run(c, dir, opt);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(16),
                              X(Op::free, 90).old(1),  // 200 - (100 + 2 records x 5)
                              X(Op::thread_end, 90),
                          });
  EXPECT_EQ(r.rep.captured_duration_ns, 190u);
  EXPECT_EQ(r.rep.duration_ns, 80u);
  EXPECT_EQ(r.rep.shim_cost_ns, 115u);  // 100 + 3 records x 5
  EXPECT_EQ(r.rep.corrected_wall_ns, 1000u - 115u);
}

// Every thread takes one correction: the largest shim cost of any thread so
// far. With each thread's own (before), the two threads' timelines drifted
// apart (15 ns by the end here: thread 1 paid 10, thread 0 25), and every
// record thread 1 wrote held thread 0's next ones at its time (its free of B
// at 65, not 60); a server's main thread sat at one time for 98% of its
// calls. At 2 ns a tick every time doubles (costs are in ticks).
TEST(Normalise, EveryThreadTakesTheLargestShimCost) {
  TempDir dir;
  const uint64_t A = 0xA000, B = 0xB000, C = 0xC000, D = 0xD000, E = 0xE000;
  Capture c;
  c.event_cost_x1024 = 5 * 1024;
  c.thread(0, {rec(Op::malloc, 1000, A, 1), rec(Op::malloc, 1020, B, 2), rec(Op::free, 1040, A),
               rec(Op::malloc, 1060, D, 4), rec(Op::free, 1080, B), rec(Op::free, 1100, D)});
  c.thread(1, {rec(Op::malloc, 1010, C, 3), rec(Op::free, 1070, C), rec(Op::malloc, 1110, E, 5)});
  Result r = run(c, dir);
  // Thread 0's cost: 5 ns for each of its records before; thread 1's is
  // never the larger.
  expect_events(r.events, {
                              X(Op::thread_start, 0, 0),
                              X(Op::malloc, 0, 0).id(1).size(1),
                              X(Op::thread_start, 10, 1),
                              X(Op::malloc, 10, 1).id(2).size(3),
                              X(Op::malloc, 15, 0).id(3).size(2),  // 20 - 5
                              X(Op::free, 30, 0).old(1),           // 40 - 10
                              X(Op::malloc, 45, 0).id(4).size(4),  // 60 - 15
                              X(Op::free, 55, 1).old(2),           // 70 - 15 (its own cost: 5)
                              X(Op::free, 60, 0).old(3),           // 80 - 20
                              X(Op::free, 75, 0).old(4),           // 100 - 25
                              X(Op::thread_end, 75, 0),
                              X(Op::malloc, 85, 1).id(5).size(5),  // 110 - 25 (its own: 10)
                              X(Op::thread_end, 85, 1),
                          });
  expect_anomalies(r.rep, {});
  EXPECT_EQ(r.rep.duration_ns, 85u);
  EXPECT_EQ(r.rep.shim_cost_ns, 30u);  // thread 0's 6 records x 5

  TempDir dir2;
  NormaliseOptions two;
  two.ns_per_tick = 2;
  Result r2 = run(c, dir2, two);
  ASSERT_EQ(r2.events.size(), r.events.size());
  for (size_t i = 0; i < r.events.size(); ++i) EXPECT_EQ(r2.events[i].time, 2 * r.events[i].time) << i;
  EXPECT_EQ(r2.rep.shim_cost_ns, 60u);
}

// A shim cost beyond the clock's time since the start (a damaged
// kRawOverhead: 10^15 ticks, 100 ticks in) counts as that time: the other
// thread's records then take their own clock's advance again (thread 1's
// last at 200, 1400 less the 200 ticks since the start at thread 0's last
// record). Taken whole, every thread's times would have moved on at a tenth
// of the clock for the rest of the capture.
TEST(Normalise, AShimCostBeyondTheClockCountsAsTheClock) {
  TempDir dir;
  const uint64_t A = 0xA000, B = 0xB000, C = 0xC000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1000, A, 1), rec(uint32_t(raw::kRawOverhead), 1100, uint64_t{1} << 50),
               rec(Op::free, 1200, A)});
  c.thread(1, {rec(Op::malloc, 1150, B, 2), rec(Op::malloc, 1300, C, 3), rec(Op::free, 1400, C)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 0, 0),
                              X(Op::malloc, 0, 0).id(1).size(1),
                              X(Op::thread_start, 50, 1),
                              X(Op::malloc, 50, 1).id(2).size(2),  // 150 - (90 + 10)
                              X(Op::free, 55, 0).old(1),           // 200 - (100 + 45)
                              X(Op::thread_end, 55, 0),
                              X(Op::malloc, 100, 1).id(3).size(3),  // 300 - 200
                              X(Op::free, 200, 1).old(3),
                              X(Op::thread_end, 200, 1),
                          });
  EXPECT_EQ(r.rep.shim_cost_ns, 400u);  // the time to the last record, not 2^50
}

// A thread's timed stall (thread 0's 200 ns, reported once it is over) is
// taken off by at most 9/10 of the clock's advance at a time: the records
// after it move on, where a correction taken whole at once held them all at
// the time of the last record before it (290).
TEST(Normalise, AStallIsTakenOffTheRecordsAfterItGradually) {
  TempDir dir;
  const uint64_t A = 0xA000, B = 0xB000, C = 0xC000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1000, A, 1), rec(uint32_t(raw::kRawOverhead), 1300, 200), rec(Op::free, 1310, A)});
  c.thread(1, {rec(Op::malloc, 1100, B, 2), rec(Op::malloc, 1290, C, 3), rec(Op::free, 1320, B), rec(Op::free, 1340, C),
               rec(Op::free, 1700, 0)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 0, 0),
                              X(Op::malloc, 0, 0).id(1).size(1),
                              X(Op::thread_start, 100, 1),
                              X(Op::malloc, 100, 1).id(2).size(2),
                              X(Op::malloc, 290, 1).id(3).size(3),
                              X(Op::free, 292, 0).old(1),  // 310 - (9 + 9)
                              X(Op::thread_end, 292, 0),
                              X(Op::free, 293, 1).old(2),  // 320 - 27
                              X(Op::free, 295, 1).old(3),  // 340 - 45
                              X(Op::free, 500, 1),         // 700 - 200: caught up
                              X(Op::thread_end, 500, 1),
                          });
  EXPECT_EQ(r.rep.shim_cost_ns, 200u);
}

// The program's own memory: addresses become regions and offsets; a partial
// munmap leaves the rest of its region; a MAP_FIXED mapping replaces what
// was there; a release of memory never mapped while captured is counted and
// dropped; resident pages become touches behind the region's previous call;
// a latency record names the call right before it; large blocks' counts
// name their objects.
std::vector<std::string> memory_text(const trace::TraceReader& r) {
  std::vector<std::string> out;
  for (const trace::MemoryEvent& m : r.read_memory_events())
    out.push_back(std::string(trace::mem_op_name(m.op)) + " after " + std::to_string(m.after) + " t" +
                  std::to_string(m.thread) + " r" + std::to_string(m.region) + " +" + std::to_string(m.offset) + " " +
                  std::to_string(m.length) + " p" +
                  (m.pages == trace::kUnknownPages ? std::string("?") : std::to_string(m.pages)) +
                  (m.new_region ? " -> r" + std::to_string(m.new_region) + " " + std::to_string(m.new_length) : ""));
  return out;
}

// The program's own mappings are followed while they are mapped (a region
// each, dropped once wholly unmapped): from 2^20 at once on, each doubling
// is checked against the memory available first. A program that maps and
// unmaps in a loop holds one at a time, however long it runs. (Their
// records are not held: below.)
TEST(Normalise, ProgramsOwnMappingsAreHeldAgainstTheMemoryAvailable) {
  using heaplab::normalise::MemoryMap;
  TempDir dir;
  constexpr size_t n = MemoryMap::kCheckedFrom;
  const uint64_t need = uint64_t(n) * 2 * MemoryMap::kBytesPerRegion;
  setenv("HEAPLAB_MEMORY_AVAILABLE", std::to_string(need - 1).c_str(), 1);
  std::string error;
  {
    MemoryMap loop(dir.path());
    heaplab::normalise::MemoryPosition at;
    try {
      for (size_t i = 0; i < n + 10; ++i, ++at.after) {
        loop.map(at, 0x100000, 0x10000, false, 0);
        loop.advise(at, 0x100000, 0x4000, false, 1);
        loop.unmap(at, 0x104000, 0xc000, 0);  // (the rest first: the region goes with its last byte)
        loop.unmap(at, 0x100000, 0x4000, 0);
      }
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    EXPECT_EQ(error, "");
    EXPECT_EQ(loop.counts().regions, n + 10);
  }
  MemoryMap m(dir.path());
  heaplab::normalise::MemoryPosition at;
  size_t maps = 0;
  try {
    for (; maps < n + 1; ++maps, ++at.after) m.map(at, 0x100000 + maps * 0x10000, 0x10000, false, 0);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  unsetenv("HEAPLAB_MEMORY_AVAILABLE");
  EXPECT_EQ(maps, n - 1);  // regions 1 .. 2^20 - 1; the next is the one refused
  EXPECT_EQ(error,
            "the program's own memory calls (mmap, munmap, ...): 1048575 mappings at once so far; twice that needs "
            "about 160 MiB to follow (80 bytes a mapping), more than the 159 MiB this machine has available");
}

// The records are not held: past a run of them they are sorted and written
// to a scratch file beside the trace, and merged when the trace is
// written. Small runs (and more runs than are merged at once) give the
// records in exactly the order of one run held whole: touches placed far
// behind, objects' counts by id whatever the order they came in, ties in
// the order made; and the scratch file is gone.
TEST(Normalise, ProgramsOwnMemoryRecordsSpillInRunsInTheSameOrder) {
  using heaplab::normalise::MemoryMap;
  using heaplab::normalise::MemoryPosition;
  TempDir dir;
  MemoryMap whole(dir.path(), size_t{1} << 20), runs(dir.path(), 50);
  uint64_t x = 88172645463325252ull;
  auto rnd = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  MemoryPosition at;
  for (int i = 0; i < 4000; ++i) {
    at.after += rnd() % 3;
    at.thread = uint32_t(rnd() % 4);
    at.time += 10;
    const uint64_t base = 0x10000000 + (rnd() % 64) * 0x100000;
    const uint64_t pages = rnd() % 3 ? 2 : trace::kUnknownPages, id = 1 + rnd() % 100000;
    for (MemoryMap* m : {&whole, &runs}) {
      switch (i % 5) {
        case 0:
          m->map(at, base, 0x100000, true, pages);
          break;
        case 1:
          m->advise(at, base + 0x1000, 0x4000, i % 2, 3);
          break;
        case 2:
          m->resident(base, 0x8000, 5);
          break;
        case 3:
          m->object(id, 65536, 4);
          break;
        default:
          m->latency(at.after, at.thread, 50);
          m->unmap(at, base + 0x80000, 0x80000, 7);
      }
    }
  }
  ASSERT_EQ(runs.records(), whole.records());
  EXPECT_GT(runs.records(), 5000u);
  trace::MemoryEvent a, b;
  uint64_t n = 0;
  while (whole.next(a)) {
    ASSERT_TRUE(runs.next(b)) << n;
    ASSERT_EQ(a, b) << "record " << n;
    ++n;
  }
  EXPECT_FALSE(runs.next(b));
  EXPECT_EQ(n, whole.records());
  EXPECT_EQ(whole.runs_written(), 0u);
  EXPECT_EQ(whole.scratch_peak_bytes(), 0u);
  EXPECT_GT(runs.runs_written(), heaplab::normalise::MemorySorter::kMaxRuns + 1);  // (merged runs too)
  EXPECT_GT(runs.scratch_peak_bytes(), 0u);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // (unlinked once made)
}

// capture --latency past the calls kept: they are thinned evenly over the
// whole run (one in 2^L by a hash of their seq), not the first ones kept;
// what is read back is exactly what is counted kept, in trace order, with
// the other records all there, through the scratch runs too.
TEST(Normalise, TimedCallsPastTheLimitAreThinnedEvenlyOverTheRun) {
  using heaplab::normalise::MemoryMap;
  TempDir dir;
  constexpr uint64_t kCalls = 100000, kMax = 4000;
  MemoryMap held(dir.path(), size_t{1} << 20, kMax), runs(dir.path(), 300, kMax), all(dir.path(), 300, kCalls);
  for (MemoryMap* m : {&held, &runs, &all}) {
    for (uint64_t seq = 0; seq < kCalls; ++seq) {
      m->latency(seq, uint32_t(seq % 3), 100 + seq);
      if (seq % 1000 == 0) m->object(seq + 1, 4096, 1);
    }
  }
  const auto& c = held.counts();
  EXPECT_LE(c.latencies, kMax);
  EXPECT_GT(c.latencies, kMax / 2);
  EXPECT_EQ(c.latencies + c.latencies_dropped, kCalls);
  EXPECT_EQ(all.counts().latencies, kCalls);
  EXPECT_EQ(all.counts().latencies_dropped, 0u);
  EXPECT_EQ(runs.counts().latencies, c.latencies);
  EXPECT_EQ(runs.records(), held.records());
  EXPECT_EQ(held.records(), c.latencies + 100);  // and the 100 objects' counts
  // Read back: the same from both; in trace order; each tenth of the run
  // holds about a tenth of the calls kept (the first ones kept would all be
  // in the first tenth).
  std::array<uint64_t, 10> tenths{};
  uint64_t latencies = 0, objects = 0, last = 0;
  trace::MemoryEvent a, b;
  while (held.next(a)) {
    ASSERT_TRUE(runs.next(b));
    ASSERT_EQ(a, b);
    if (a.op == trace::MemOp::object) {
      ++objects;
      continue;
    }
    ASSERT_EQ(a.op, trace::MemOp::latency);
    ASSERT_GE(a.after, last);
    last = a.after;
    EXPECT_EQ(a.length, 100 + a.after);
    EXPECT_EQ(a.thread, a.after % 3);
    ++tenths[a.after / (kCalls / 10)];
    ++latencies;
  }
  EXPECT_FALSE(runs.next(b));
  EXPECT_EQ(latencies, c.latencies);
  EXPECT_EQ(objects, 100u);
  for (uint64_t n : tenths) {
    EXPECT_GT(n, latencies / 10 * 7 / 10);
    EXPECT_LT(n, latencies / 10 * 13 / 10);
  }
  uint64_t n = 0;
  while (all.next(a)) n += a.op == trace::MemOp::latency;
  EXPECT_EQ(n, kCalls);
}

// The sorter alone: records in key order, ties in the order pushed, across
// runs of 7 and the merges of 16 of them at a time.
TEST(Normalise, MemorySorterMergesRunsByKeyThenByPush) {
  using heaplab::normalise::MemorySorter;
  TempDir dir;
  MemorySorter s(dir.path(), 7);
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, uint64_t>> want;  // key, push index
  std::vector<uint32_t> thread_of;
  std::vector<uint64_t> new_length_of;
  uint64_t x = 12345;
  for (uint64_t i = 0; i < 3000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t major = (x >> 33) % 50, minor = (x >> 20) % 3;
    trace::MemoryEvent e;
    e.op = i % 3 ? trace::MemOp::touch : trace::MemOp::unmap;
    e.thread = uint32_t(x >> 40);
    e.region = i;
    // Fields far apart from one record to the next (kept as differences
    // modulo 2^64 in the runs).
    e.time = i % 2 ? UINT64_MAX - i : i;
    e.new_length = x;
    e.new_region = i + 7;
    thread_of.push_back(e.thread);
    new_length_of.push_back(x);
    s.push(major, minor, e);
    want.push_back({{major, minor}, i});
  }
  std::stable_sort(want.begin(), want.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  trace::MemoryEvent e;
  for (const auto& w : want) {
    ASSERT_TRUE(s.next(e));
    const uint64_t i = w.second;
    ASSERT_EQ(e.region, i);
    ASSERT_EQ(e.time, i % 2 ? UINT64_MAX - i : i);
    ASSERT_EQ(e.op, i % 3 ? trace::MemOp::touch : trace::MemOp::unmap);
    ASSERT_EQ(e.thread, thread_of[i]);
    ASSERT_EQ(e.new_length, new_length_of[i]);
    ASSERT_EQ(e.new_region, i + 7);
  }
  EXPECT_FALSE(s.next(e));
  EXPECT_GT(s.runs_written(), MemorySorter::kMaxRuns);
  // Less than all it wrote: merged runs' room was given back.
  EXPECT_LT(s.scratch_peak_bytes(), s.scratch_written_bytes());
}

// The scratch disk at its largest is the 16 runs of a level and the run
// they are merged into, both held until the run is written: with exactly 16
// runs, every byte the sorter wrote. Then their room is given back, and the
// final merge writes nothing.
TEST(Normalise, MemorySorterScratchPeakIsTheRunsAndTheirMerge) {
  using heaplab::normalise::MemorySorter;
  TempDir dir;
  MemorySorter s(dir.path(), 7);
  trace::MemoryEvent e;
  e.op = trace::MemOp::touch;
  for (uint64_t i = 0; i < 7 * MemorySorter::kMaxRuns; ++i) {
    e.region = i;
    s.push(1000 - i, 0, e);
    if (i == 7 * 15 - 1) {  // 15 runs: nothing merged yet
      EXPECT_EQ(s.runs_written(), 15u);
      EXPECT_EQ(s.scratch_peak_bytes(), s.scratch_written_bytes());
    }
  }
  EXPECT_EQ(s.runs_written(), MemorySorter::kMaxRuns + 1);  // the 16th run made a level of 16: merged
  const uint64_t written = s.scratch_written_bytes();
  EXPECT_EQ(s.scratch_peak_bytes(), written);
  for (uint64_t i = 7 * MemorySorter::kMaxRuns; i-- > 0;) {
    ASSERT_TRUE(s.next(e));
    ASSERT_EQ(e.region, i);
  }
  EXPECT_FALSE(s.next(e));
  EXPECT_EQ(s.scratch_written_bytes(), written);
  MemorySorter held(dir.path());
  held.push(1, 0, e);
  ASSERT_TRUE(held.next(e));
  EXPECT_EQ(held.scratch_peak_bytes(), 0u);
}

TEST(Normalise, ProgramsOwnMemoryBecomesRegions) {
  TempDir dir;
  Capture c;
  using namespace heaplab::raw;
  c.thread(0, {
                  rec(kRawMmap, 1010, 0x100000, 0x40000, 0x22),                      // r1: 256 KiB
                  rec(Op::malloc, 1020, 0x1000, 100000),                             // object 1
                  rec(kRawLatency, 1021, 7),                                         // the malloc took 7 ns
                  rec(kRawMunmap, 1030, 0x110000, 0x10000, 3),                       // 64 KiB from +64 KiB: 3 resident
                  rec(kRawMunmap, 1040, 0x900000, 0x1000, 1),                        // never mapped: dropped
                  rec(kRawMadvise, 1050, 0x100000, 0x2000, 4 | 2 << 8),              // DONTNEED, 2 resident
                  rec(kRawMmap, 1060, 0x130000, 0x10000, 0x32 | uint64_t{2} << 32),  // MAP_FIXED over r1's tail
                                                                                     // (2 pages there): r2
                  rec(kRawResident, 1070, 0x1000, 5, 100000),                        // object 1: 5 pages
                  rec(Op::free, 1071, 0x1000), rec(kRawMremapBegin, 1080, 0x130000, 0x10000, 4),  // r2, 4 resident
                  rec(kRawMremap, 1081, 0x200000, 0x20000, 0x130000),                             // -> r3 at 0x200000
                  rec(kRawBreak, 1090, 0x500000, 0x502000, 0),    // r4: the break up 8 KiB
                  rec(kRawResident, 1100, 0x200000, 6, 0x20000),  // r3 at exit: 6
              });
  Result r = run(c, dir);
  EXPECT_EQ(r.rep.memory_calls, 7u);  // 2 mmap, 2 munmap, madvise, mremap, break (MAP_FIXED's replacing is not a call)
  EXPECT_EQ(r.rep.regions, 4u);
  EXPECT_EQ(r.rep.unknown_memory_releases, 1u);
  EXPECT_EQ(r.rep.latency_samples, 1u);
  EXPECT_EQ(memory_text(*r.reader), (std::vector<std::string>{
                                        "mmap after 1 t0 r1 +0 262144 p0",
                                        "touch after 1 t0 r1 +65536 65536 p3",
                                        "latency after 1 t0 r0 +0 7 p0",
                                        "munmap after 2 t0 r1 +65536 65536 p3",
                                        "touch after 2 t0 r1 +0 8192 p2",
                                        "madvise_dontneed after 2 t0 r1 +0 8192 p2",
                                        "touch after 2 t0 r1 +196608 65536 p2",
                                        "munmap after 2 t0 r1 +196608 65536 p2",
                                        "mmap after 2 t0 r2 +0 65536 p0",
                                        "touch after 2 t0 r2 +0 65536 p4",
                                        "mremap after 3 t0 r2 +0 65536 p4 -> r3 131072",
                                        "touch after 3 t0 r3 +0 131072 p6",
                                        "mmap after 3 t0 r4 +0 8192 p0",
                                        "object_resident after 0 t0 r1 +0 100000 p5",
                                    }));
}

// mremap's flags: MREMAP_FIXED unmaps its target first; MREMAP_DONTUNMAP
// moves the pages to a new mapping and leaves the old one, emptied; one of a
// mapping that is not the program's is counted and dropped.
TEST(Normalise, MremapFixedAndDontUnmap) {
  TempDir dir;
  Capture c;
  using namespace heaplab::raw;
  c.thread(0, {
                  rec(Op::malloc, 1005, 0x1000, 16),
                  rec(kRawMmap, 1010, 0x100000, 0x20000, 0x22),                // r1
                  rec(kRawMmap, 1020, 0x300000, 0x20000, 0x22),                // r2
                  rec(kRawMremapBegin, 1030, 0x100000, 0x10000, 3),            // r1's first 64 KiB,
                  rec(kRawMremap, 1031, 0x300000, 0x10000, 0x100000 | 1 | 2),  // onto r2's: r3
                  rec(kRawMremapBegin, 1040, 0x110000, 0x10000, 5),            // r1's rest,
                  rec(kRawMremap, 1041, 0x700000, 0x10000, 0x110000 | 1 | 4),  // DONTUNMAP: r4
                  rec(kRawMremapBegin, 1050, 0x900000, 0x1000, 1),             // not the program's
                  rec(kRawMremap, 1051, 0xa00000, 0x1000, 0x900000 | 1 | 4),
                  rec(Op::free, 1060, 0x1000),
              });
  Result r = run(c, dir);
  EXPECT_EQ(r.rep.memory_calls, 5u);
  EXPECT_EQ(r.rep.regions, 4u);
  EXPECT_EQ(r.rep.unknown_memory_releases, 1u);
  EXPECT_EQ(memory_text(*r.reader), (std::vector<std::string>{
                                        "mmap after 2 t0 r1 +0 131072 p0",
                                        "touch after 2 t0 r1 +0 65536 p3",
                                        "mmap after 2 t0 r2 +0 131072 p0",
                                        "mremap after 2 t0 r1 +0 65536 p3 -> r3 65536",
                                        "touch after 2 t0 r1 +65536 65536 p5",  // behind r1's previous call
                                        "munmap after 2 t0 r2 +0 65536 p?",
                                        "mmap after 2 t0 r4 +0 65536 p0",
                                        "touch after 2 t0 r4 +0 65536 p5",
                                        "madvise_dontneed after 2 t0 r1 +65536 65536 p5",
                                    }));
}

// Raw op 42 (kRawLost, written by the Intel PT decoders): `a` events were
// lost here; a `lost` event with that count, among the thread's events.
TEST(Normalise, LostRecordsBecomeLostEvents) {
  TempDir dir;
  Capture c;
  c.thread(0, {
                  rec(Op::malloc, 1010, 0x1000, 16),
                  rec(uint32_t(heaplab::raw::kRawLost), 1020, 7),
                  rec(uint32_t(heaplab::raw::kRawLost), 1025, 0),  // nothing lost: no event
                  rec(Op::free, 1030, 0x1000),
              });
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(16),
                              X(Op::lost, 20).count(7),
                              X(Op::free, 30).old(1),
                              X(Op::thread_end, 30),
                          });
  expect_anomalies(r.rep, {.holes = 7});
  EXPECT_EQ(r.rep.calls, 2u);
}

// ===================================================================== 2. realloc

TEST(Normalise, ReallocPairing) {
  TempDir dir;
  const uint64_t A = 0x1000, B = 0x2000, C = 0x3000, D = 0x4000, E = 0x5000, F = 0x6000, G = 0x7000;
  const uint64_t unknown = 0x9000, huge = uint64_t{1} << 40;
  Capture c;
  c.thread(0, {
                  rec(Op::malloc, 1010, A, 16), rec(raw::kRawReallocBegin, 1020, A, 32),
                  rec(Op::realloc, 1021, B, A, 32),  // moved: A's object consumed
                  rec(Op::malloc, 1030, C, 8), rec(raw::kRawReallocBegin, 1040, C, 0),
                  rec(Op::realloc, 1041, 0, C, 0),  // realloc(C, 0) == NULL: C released
                  rec(Op::malloc, 1050, D, 64), rec(raw::kRawReallocBegin, 1060, D, huge),
                  rec(Op::realloc, 1061, 0, D, huge),  // failed: D stays live
                  rec(Op::free, 1070, D),              // D's original object
                  rec(raw::kRawReallocBegin, 1080, unknown, 24),
                  rec(Op::realloc, 1081, E, unknown, 24),  // allocated before capture
                  rec(raw::kRawReallocarrayBegin, 1090, E, 8, 10), rec(Op::reallocarray, 1091, F, E, 10),
                  rec(raw::kRawReallocBegin, 1100, 0, 16),
                  rec(Op::realloc, 1101, G, 0, 16),  // realloc(NULL, 16): not unknown
                  rec(Op::free, 1110, C),            // released by realloc(C, 0): unknown now
              });
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(16),
                              X(Op::realloc, 21).id(2).old(1).size(32),
                              X(Op::malloc, 30).id(3).size(8),
                              X(Op::realloc, 41).old(3).size(0).flags(kNull),
                              X(Op::malloc, 50).id(4).size(64),
                              X(Op::realloc, 61).old(4).size(huge).flags(kNullFailed),
                              X(Op::free, 70).old(4),
                              X(Op::realloc, 81).id(5).size(24),
                              X(Op::reallocarray, 91).id(6).old(5).size(8).count(10),
                              X(Op::realloc, 101).id(7).size(16),
                              X(Op::thread_end, 110),
                          });
  expect_anomalies(r.rep, {.unknown_frees = 1, .unknown_reallocs = 1});
  EXPECT_EQ(r.rep.records, 17u);
  EXPECT_EQ(r.rep.calls, 10u);
  EXPECT_EQ(r.rep.objects, 7u);
  EXPECT_EQ(r.rep.live_at_end, 3u);  // B, F, G
}

// Blocks whose size does not fit the live table's packed word (2^24 - 1
// bytes and more) are kept whole beside it: moved by realloc, kept by a
// failed one, replaced at a still-live address, counted resident and freed,
// each with its own id and bytes (the live bytes' peak is exact); the
// largest that fits and the least that does not, at its edge.
TEST(Normalise, BlocksTooBigForThePackedEntryKeepTheirSizes) {
  TempDir dir;
  const uint64_t A = 0x1000, B = 0x2000, C = 0x3000, D = 0x4000;
  const uint64_t mib20 = 20 << 20, mib30 = 30 << 20, huge = uint64_t{1} << 41, absurd = uint64_t{1} << 62;
  const uint64_t fits = (1 << 24) - 2;  // the largest block the packed word holds
  Capture c;
  c.thread(0, {
                  rec(Op::malloc, 1010, A, mib20),
                  rec(Op::malloc, 1020, B, 100),
                  rec(raw::kRawReallocBegin, 1030, A, mib30),
                  rec(Op::realloc, 1031, C, A, mib30),  // moved: A's 20 MiB consumed
                  rec(raw::kRawReallocBegin, 1040, C, absurd),
                  rec(Op::realloc, 1041, 0, C, absurd),  // failed: C's 30 MiB stay live
                  rec(Op::malloc, 1050, C, 64),          // C again while live: the 30 MiB leak
                  rec(Op::malloc, 1060, D, huge),
                  rec(raw::kRawResident, 1070, D, 3, huge),  // D's object: 3 pages resident
                  rec(Op::free, 1080, D),
                  rec(Op::free, 1090, C),
                  rec(Op::free, 1100, B),
                  rec(Op::malloc, 1110, A, fits),
                  rec(Op::malloc, 1120, B, fits + 1),
                  rec(raw::kRawResident, 1130, B, 1, fits + 1),
                  rec(Op::free, 1140, A),
                  rec(Op::free, 1150, B),
              });
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(mib20),
                              X(Op::malloc, 20).id(2).size(100),
                              X(Op::realloc, 31).id(3).old(1).size(mib30),
                              X(Op::realloc, 41).old(3).size(absurd).flags(kNullFailed),
                              X(Op::malloc, 50).id(4).size(64),
                              X(Op::malloc, 60).id(5).size(huge),
                              X(Op::free, 80).old(5),
                              X(Op::free, 90).old(4),
                              X(Op::free, 100).old(2),
                              X(Op::malloc, 110).id(6).size(fits),
                              X(Op::malloc, 120).id(7).size(fits + 1),
                              X(Op::free, 140).old(6),
                              X(Op::free, 150).old(7),
                              X(Op::thread_end, 150),
                          });
  expect_anomalies(r.rep, {.reused_live = 1});
  EXPECT_EQ(r.rep.heap_peak, huge + mib30 + 100 + 64);  // 20 MiB taken off at the realloc, 30 MiB never
  EXPECT_EQ(r.rep.objects_peak, 4u);                    // 2, the leaked 3, 4 and 5
  EXPECT_EQ(r.rep.live_at_end, 0u);
  EXPECT_EQ(memory_text(*r.reader), (std::vector<std::string>{"object_resident after 0 t0 r5 +0 2199023255552 p3",
                                                              "object_resident after 0 t0 r7 +0 16777215 p1"}));
}

TEST(Normalise, ReallocInPlaceAndFailedReallocarray) {
  TempDir dir;
  const uint64_t A = 0x1000;
  Capture c;
  c.thread(0, {
                  rec(Op::malloc, 1010, A, 16),
                  rec(raw::kRawReallocBegin, 1020, A, 20),
                  rec(Op::realloc, 1021, A, A, 20),  // grown in place: same address, new id
                  rec(raw::kRawReallocarrayBegin, 1030, A, 8, uint64_t{1} << 62),
                  rec(Op::reallocarray, 1031, 0, A, uint64_t{1} << 62),  // overflow: fails, A stays
                  rec(Op::free, 1040, A),
              });
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(16),
                              X(Op::realloc, 21).id(2).old(1).size(20),
                              X(Op::reallocarray, 31).old(2).size(8).count(uint64_t{1} << 62).flags(kNullFailed),
                              X(Op::free, 40).old(2),
                              X(Op::thread_end, 40),
                          });
  expect_anomalies(r.rep, {});
  EXPECT_EQ(r.rep.live_at_end, 0u);
}

TEST(Normalise, ReallocNeverReturningKeepsItsObject) {
  // The program died inside realloc: only the begin record exists.
  TempDir dir;
  const uint64_t A = 0x1000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, A, 16), rec(raw::kRawReallocBegin, 1020, A, 4096)});
  c.thread(1, {rec(Op::free, 1030, A)});  // a later free on another thread still resolves
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10, 0),
                              X(Op::malloc, 10, 0).id(1).size(16),
                              X(Op::thread_end, 20, 0),
                              X(Op::thread_start, 30, 1),
                              X(Op::free, 30, 1).old(1),
                              X(Op::thread_end, 30, 1),
                          });
  expect_anomalies(r.rep, {.unfinished_reallocs = 1});
}

TEST(Normalise, ReallocEndWithoutBeginAfterHole) {
  // The begin record is a hole: the end record alone still consumes the old object.
  TempDir dir;
  const uint64_t A = 0x1000, B = 0x2000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, A, 16), hole(), rec(Op::realloc, 1021, B, A, 48), rec(Op::free, 1030, B)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(16),
                              X(Op::lost, 21).count(1),
                              X(Op::realloc, 21).id(2).old(1).size(48),
                              X(Op::free, 30).old(2),
                              X(Op::thread_end, 30),
                          });
  expect_anomalies(r.rep, {.holes = 1});
}

// ===================================================================== 3. threads

TEST(Normalise, TwoThreadsMergedByTime) {
  TempDir dir;
  const uint64_t A = 0xA000, B = 0xB000, C = 0xC000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, A, 10), rec(Op::malloc, 1030, B, 30), rec(Op::free, 1050, C)});
  c.thread(1, {rec(Op::malloc, 1020, C, 20), rec(Op::free, 1040, A), rec(Op::free, 1060, B)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10, 0),
                              X(Op::malloc, 10, 0).id(1).size(10),
                              X(Op::thread_start, 20, 1),
                              X(Op::malloc, 20, 1).id(2).size(20),
                              X(Op::malloc, 30, 0).id(3).size(30),
                              X(Op::free, 40, 1).old(1),  // thread 0's object
                              X(Op::free, 50, 0).old(2),  // thread 1's object
                              X(Op::thread_end, 50, 0),
                              X(Op::free, 60, 1).old(3),
                              X(Op::thread_end, 60, 1),
                          });
  expect_anomalies(r.rep, {});
  EXPECT_EQ(r.rep.threads, 2u);
  EXPECT_EQ(r.rep.events, 10u);
  EXPECT_EQ(r.rep.duration_ns, 50u);
  EXPECT_EQ(r.reader->thread_info(0), (trace::ThreadInfo{100, "thread0"}));
  EXPECT_EQ(r.reader->thread_info(1), (trace::ThreadInfo{101, "thread1"}));
}

TEST(Normalise, ThreadIndicesInOrderOfFirstEvent) {
  // Slot 1 has the earliest record: it becomes trace thread 0.
  TempDir dir;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1020, 0x1000, 1)});
  c.thread(1, {rec(Op::malloc, 1010, 0x2000, 2)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10, 0),
                              X(Op::malloc, 10, 0).id(1).size(2),
                              X(Op::thread_end, 10, 0),
                              X(Op::thread_start, 20, 1),
                              X(Op::malloc, 20, 1).id(2).size(1),
                              X(Op::thread_end, 20, 1),
                          });
  EXPECT_EQ(r.reader->thread_info(0).os_tid, 101u);
  EXPECT_EQ(r.reader->thread_info(1).os_tid, 100u);
}

TEST(Normalise, ReleaseBeforeAllocationAtTheSameTick) {
  // Slot 0's malloc returns P at the tick slot 1 frees it: the free sorts
  // first without any reordering.
  TempDir dir;
  const uint64_t P = 0x5000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, 0x100, 1), rec(Op::malloc, 1050, P, 2)});
  c.thread(1, {rec(Op::malloc, 1020, P, 3), rec(Op::free, 1050, P)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10, 0),
                              X(Op::malloc, 10, 0).id(1).size(1),
                              X(Op::thread_start, 20, 1),
                              X(Op::malloc, 20, 1).id(2).size(3),
                              X(Op::free, 50, 1).old(2),
                              X(Op::thread_end, 50, 1),
                              X(Op::malloc, 50, 0).id(3).size(2),
                              X(Op::thread_end, 50, 0),
                          });
  expect_anomalies(r.rep, {});
}

// ===================================================================== 4. unfenced TSC

TEST(Normalise, AllocationOfAnAddressFreedLaterOnAnotherThreadIsReordered) {
  // Thread 1's malloc returns P (tick 100) before thread 0's free of P
  // (tick 105) by the stamps: the free must be processed first.
  TempDir dir;
  const uint64_t P = 0x7000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, P, 8), rec(Op::free, 1105, P)});
  c.thread(1, {rec(Op::malloc, 1100, P, 16)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10, 0),
                              X(Op::malloc, 10, 0).id(1).size(8),
                              X(Op::thread_start, 100, 1),
                              X(Op::free, 105, 0).old(1),
                              X(Op::thread_end, 105, 0),
                              X(Op::malloc, 105, 1).id(2).size(16),
                              X(Op::thread_end, 105, 1),
                          });
  expect_times_never_decrease(r.events);
  expect_anomalies(r.rep, {.reordered = 1});
  EXPECT_EQ(r.rep.live_at_end, 1u);
}

TEST(Normalise, FreeStampedBeforeItsAllocationIsReordered) {
  // Thread 1 frees Q at tick 50; thread 0's malloc that returns Q is stamped 55.
  TempDir dir;
  const uint64_t Q = 0x200;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, 0x100, 1), rec(Op::malloc, 1055, Q, 2)});
  c.thread(1, {rec(Op::free, 1050, Q), rec(Op::malloc, 1060, 0x300, 3)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10, 0),
                              X(Op::malloc, 10, 0).id(1).size(1),
                              X(Op::thread_start, 50, 1),
                              X(Op::malloc, 55, 0).id(2).size(2),
                              X(Op::thread_end, 55, 0),
                              X(Op::free, 55, 1).old(2),
                              X(Op::malloc, 60, 1).id(3).size(3),
                              X(Op::thread_end, 60, 1),
                          });
  expect_times_never_decrease(r.events);
  expect_anomalies(r.rep, {.reordered = 1});
  EXPECT_EQ(r.rep.calls, 4u);
  EXPECT_EQ(r.rep.live_at_end, 2u);
}

TEST(Normalise, ReallocBeginStampedBeforeItsAllocationIsReordered) {
  TempDir dir;
  const uint64_t Q = 0x200, R = 0x400;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, 0x100, 1), rec(Op::malloc, 1055, Q, 2)});
  c.thread(1, {rec(raw::kRawReallocBegin, 1050, Q, 64), rec(Op::realloc, 1060, R, Q, 64)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10, 0),
                              X(Op::malloc, 10, 0).id(1).size(1),
                              X(Op::thread_start, 50, 1),
                              X(Op::malloc, 55, 0).id(2).size(2),
                              X(Op::thread_end, 55, 0),
                              X(Op::realloc, 60, 1).id(3).old(2).size(64),
                              X(Op::thread_end, 60, 1),
                          });
  expect_anomalies(r.rep, {.reordered = 1});
}

// A free of memory allocated before capture started, on a thread whose
// address is returned again by another thread's malloc a whole second later,
// is not an unfenced-TSC inversion: the free stays unknown and the malloc
// keeps its time.
TEST(Normalise, UnknownFreeIsNotPairedWithAnAllocationFarInTheFuture) {
  TempDir dir;
  const uint64_t X_ = 0x5000;
  const uint64_t later = kStart + 1000000000;  // one second after the free
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, 0x100, 1), rec(Op::malloc, later, X_, 2)});
  c.thread(1, {rec(Op::free, 1050, X_), rec(Op::malloc, 1060, 0x300, 3)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10, 0),
                              X(Op::malloc, 10, 0).id(1).size(1),
                              X(Op::thread_start, 50, 1),
                              X(Op::malloc, 60, 1).id(2).size(3),
                              X(Op::thread_end, 60, 1),
                              X(Op::malloc, later - kStart, 0).id(3).size(2),
                              X(Op::thread_end, later - kStart, 0),
                          });
  expect_anomalies(r.rep, {.unknown_frees = 1});
  EXPECT_EQ(r.rep.live_at_end, 3u);
}

// ===================================================================== 5. unknown / reused

TEST(Normalise, FreeOfUnknownAddressIsSkipped) {
  TempDir dir;
  Capture c;
  c.thread(0, {rec(Op::free, 1010, 0xDEAD0), rec(Op::malloc, 1020, 0x1000, 8), rec(Op::op_delete, 1030, 0xBEEF0),
               rec(Op::free, 1040, 0x1000)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 20).id(1).size(8),
                              X(Op::free, 40).old(1),
                              X(Op::thread_end, 40),
                          });
  expect_anomalies(r.rep, {.unknown_frees = 2});
  EXPECT_EQ(r.rep.calls, 2u);
  EXPECT_EQ(r.rep.records, 4u);
}

TEST(Normalise, AllocationOfStillLiveAddressCountsReusedLive) {
  TempDir dir;
  const uint64_t A = 0x1000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, A, 8), rec(Op::malloc, 1020, A, 16), rec(Op::free, 1030, A)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(8),
                              X(Op::malloc, 20).id(2).size(16),
                              X(Op::free, 30).old(2),  // the newer object
                              X(Op::thread_end, 30),
                          });
  expect_anomalies(r.rep, {.reused_live = 1});
}

TEST(Normalise, ReusedLiveAcrossThreadsWithoutResolvingRecord) {
  // Thread 1's head record is a free of another address: nothing resolves.
  TempDir dir;
  const uint64_t A = 0x1000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, A, 8), rec(Op::malloc, 1030, A, 16)});
  c.thread(1, {rec(Op::malloc, 1020, 0x2000, 4), rec(Op::free, 1040, 0x2000)});
  Result r = run(c, dir);
  expect_anomalies(r.rep, {.reused_live = 1});
  EXPECT_EQ(r.rep.calls, 4u);
}

// ===================================================================== 6. holes

TEST(Normalise, HoleInsideBlockIsALostEvent) {
  TempDir dir;
  const uint64_t A = 0x1000, B = 0x2000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, A, 8), hole(), hole(), rec(Op::malloc, 1020, B, 16), rec(Op::free, 1030, A)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(8),
                              X(Op::lost, 20).count(2),
                              X(Op::malloc, 20).id(2).size(16),
                              X(Op::free, 30).old(1),
                              X(Op::thread_end, 30),
                          });
  expect_anomalies(r.rep, {.holes = 2});
  EXPECT_EQ(r.rep.records, 3u);
}

TEST(Normalise, HoleAtTheStartOfAThreadIsALostEvent) {
  // The thread's very first record slot is zero, complete records follow.
  TempDir dir;
  const uint64_t A = 0x1000;
  Capture c;
  c.thread(0, {hole(), rec(Op::malloc, 1010, A, 8), rec(Op::free, 1020, A)});
  Result r = run(c, dir);
  EXPECT_EQ(r.rep.holes, 1u);
  uint64_t lost = 0, lost_events = 0;
  for (const Event& e : r.events)
    if (e.op == Op::lost) {
      lost += e.count;
      ++lost_events;
      EXPECT_EQ(e.thread, 0u);
    }
  EXPECT_EQ(lost_events, 1u) << dump(r.events);
  EXPECT_EQ(lost, 1u);
  EXPECT_EQ(r.rep.calls, 2u);
}

TEST(Normalise, ZeroTailOfABlockIsNotAHole) {
  // A full block in .blocks ends with a partly used current block; the zero
  // tail of the current block is not counted.
  TempDir dir;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, 0x1000, 8), rec(Op::free, 1020, 0x1000)});
  Result r = run(c, dir);
  expect_anomalies(r.rep, {});
  EXPECT_EQ(r.rep.events, 4u);
}

TEST(Normalise, HoleAtTheStartOfALaterBlock) {
  TempDir dir;
  Capture c;
  c.appended.push_back(block(0, 0, {rec(Op::malloc, 1010, 0x1000, 8)}));
  c.map(0, block(0, 1, {hole(), hole(), hole(), rec(Op::free, 1020, 0x1000)}));
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(8),
                              X(Op::lost, 20).count(3),
                              X(Op::free, 20).old(1),
                              X(Op::thread_end, 20),
                          });
  expect_anomalies(r.rep, {.holes = 3});
}

// ===================================================================== 7. blocks

TEST(RawFile, MissingBlocksFileIsAnError) {
  TempDir dir;
  Capture c;
  c.appended.push_back(block(0, 0, {rec(Op::malloc, 1010, 0x1000, 16)}));
  c.map(0, block(0, 1, {rec(Op::free, 1020, 0x1000)}));
  c.blocks_file = false;
  const std::string path = c.write(dir);
  EXPECT_EQ(raw_error(path),
            path + ".blocks: missing, but the capture appended 1 blocks to it (copy it along with " + path + ")");
}

TEST(RawFile, PartlyConsumedByALiveNormaliserIsRefused) {
  // Its consumed blocks are gone from .blocks: what is left would make a
  // trace missing calls, with nothing to say so.
  TempDir dir;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, 0x1000, 16)});
  c.consumed_blocks = 7;
  const std::string path = c.write(dir);
  EXPECT_EQ(raw_error(path), path +
                                 ": raw capture partly normalised already while the program ran (7 blocks deleted): "
                                 "normalising the rest would lose calls silently");
}

TEST(RawFile, BlocksInSeqOrder) {
  TempDir dir;
  Capture c;
  // .blocks holds seq 1 before seq 0 (and another thread's block between).
  c.appended.push_back(block(0, 1, {rec(Op::malloc, 1020, 0x2000, 2)}));
  c.appended.push_back(block(1, 0, {rec(Op::malloc, 1005, 0x9000, 9)}));
  c.appended.push_back(block(0, 0, {rec(Op::malloc, 1010, 0x1000, 1)}));
  c.map(0, block(0, 2, {rec(Op::malloc, 1030, 0x3000, 3)}));
  c.map(1, block(1, 1, {rec(Op::free, 1040, 0x9000)}));
  std::string path = c.write(dir);
  {
    RawFile f(path);
    EXPECT_EQ(f.blocks(), 5u);
    EXPECT_EQ(f.blocks_missing(), 0u);
    ASSERT_EQ(f.threads().size(), 2u);
    const RawThread& t0 = f.threads()[0];
    EXPECT_EQ(t0.slot, 0u);
    EXPECT_EQ(t0.tid, 100u);
    EXPECT_EQ(t0.name, "thread0");
    ASSERT_EQ(t0.blocks.size(), 3u);
    for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(t0.blocks[i].header.thread_block_seq, i);
    EXPECT_EQ(t0.blocks[0].mapped, nullptr);
    EXPECT_EQ(t0.blocks[0].offset, 2 * raw::kBlockSize);
    EXPECT_EQ(t0.blocks[1].offset, 0u);
    EXPECT_NE(t0.blocks[2].mapped, nullptr);
    RawThreadCursor cur(f, t0);
    std::vector<uint64_t> sizes;
    while (const raw::Record* r = cur.next()) sizes.push_back(r->b);
    EXPECT_EQ(sizes, (std::vector<uint64_t>{1, 2, 3}));
    EXPECT_EQ(cur.holes(), 0u);
    EXPECT_EQ(cur.next(), nullptr);  // stays at the end
    EXPECT_EQ(f.command_line(), (std::vector<std::string>{"prog", "arg1"}));
    EXPECT_TRUE(f.clean_exit());
    EXPECT_EQ(f.ns_per_tick(), 1.0);
  }
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 5, 0),
                              X(Op::malloc, 5, 0).id(1).size(9),
                              X(Op::thread_start, 10, 1),
                              X(Op::malloc, 10, 1).id(2).size(1),
                              X(Op::malloc, 20, 1).id(3).size(2),
                              X(Op::malloc, 30, 1).id(4).size(3),
                              X(Op::thread_end, 30, 1),
                              X(Op::free, 40, 0).old(1),
                              X(Op::thread_end, 40, 0),
                          });
  expect_anomalies(r.rep, {});
}

TEST(RawFile, FullBlockThenMappedBlock) {
  // A completely filled block (kRecordsPerBlock records) in .blocks.
  TempDir dir;
  std::vector<raw::Record> recs;
  uint64_t t = 1010;
  for (uint64_t i = 0; i < raw::kRecordsPerBlock / 2; ++i) {
    recs.push_back(rec(Op::malloc, t++, 0x1000, i + 1));
    recs.push_back(rec(Op::free, t++, 0x1000));
  }
  ASSERT_EQ(recs.size(), raw::kRecordsPerBlock);
  Capture c;
  c.appended.push_back(block(0, 0, recs));
  c.map(0, block(0, 1, {rec(Op::malloc, t, 0x1000, 99999)}));
  Result r = run(c, dir);
  expect_anomalies(r.rep, {});
  EXPECT_EQ(r.rep.records, raw::kRecordsPerBlock + 1);
  ASSERT_EQ(r.events.size(), raw::kRecordsPerBlock + 3);
  Event last = X(Op::malloc, t - kStart).id(raw::kRecordsPerBlock / 2 + 1).size(99999);
  last.seq = r.events.size() - 2;
  EXPECT_EQ(r.events[r.events.size() - 2], last);
  EXPECT_EQ(r.events.back().op, Op::thread_end);
  expect_times_never_decrease(r.events);
}

TEST(RawFile, MappedCopyOfTheSameSeqWinsWhenItsMagicIsSet) {
  TempDir dir;
  Capture c;
  c.appended.push_back(block(0, 0, {rec(Op::malloc, 1010, 0x1000, 999)}));
  c.map(0, block(0, 0, {rec(Op::malloc, 1010, 0x1000, 111), rec(Op::malloc, 1020, 0x2000, 222)}));
  std::string path = c.write(dir);
  {
    RawFile f(path);
    EXPECT_EQ(f.blocks(), 1u);
    EXPECT_EQ(f.blocks_missing(), 0u);
    ASSERT_EQ(f.threads().size(), 1u);
    ASSERT_EQ(f.threads()[0].blocks.size(), 1u);
    EXPECT_NE(f.threads()[0].blocks[0].mapped, nullptr);
  }
  Result r = run(c, dir);
  EXPECT_EQ(malloc_sizes(r.events), (std::vector<uint64_t>{111, 222}));
  expect_anomalies(r.rep, {});
}

TEST(RawFile, MappedCopyWithoutMagicIsIgnored) {
  TempDir dir;
  Capture c;
  c.appended.push_back(block(0, 0, {rec(Op::malloc, 1010, 0x1000, 999)}));
  Block stale = block(0, 0, {rec(Op::malloc, 1010, 0x1000, 555), rec(Op::malloc, 1020, 0x2000, 556)});
  stale.magic = 0;  // being cleared by the shim
  c.map(0, stale);
  std::string path = c.write(dir);
  {
    RawFile f(path);
    EXPECT_EQ(f.blocks(), 1u);
    ASSERT_EQ(f.threads().size(), 1u);
    ASSERT_EQ(f.threads()[0].blocks.size(), 1u);
    EXPECT_EQ(f.threads()[0].blocks[0].mapped, nullptr);
  }
  Result r = run(c, dir);
  EXPECT_EQ(malloc_sizes(r.events), (std::vector<uint64_t>{999}));
  expect_anomalies(r.rep, {});
}

TEST(RawFile, MappedBlockInAnotherSlotBelongsToItsThreadBeyondNextThreadIgnored) {
  // A thread moves to a block of its own slot number when a signal handler
  // fills its block while an interrupted write is pending (switch_block).
  TempDir dir;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, 0x1000, 1)});
  c.map(1, block(0, 1, {rec(Op::malloc, 1020, 0x2000, 2)}));  // header says thread 0 in slot 1
  c.thread(2, {rec(Op::malloc, 1030, 0x3000, 3)});            // slot not handed out
  c.next_thread = 2;
  Result r = run(c, dir);
  EXPECT_EQ(malloc_sizes(r.events), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(r.rep.threads, 1u);
}

TEST(RawFile, GapInBlockSequenceIsCounted) {
  TempDir dir;
  Capture c;
  c.appended.push_back(block(0, 0, {rec(Op::malloc, 1010, 0x1000, 1)}));
  c.map(0, block(0, 2, {rec(Op::malloc, 1030, 0x3000, 3)}));
  std::string path = c.write(dir);
  {
    RawFile f(path);
    EXPECT_EQ(f.blocks(), 2u);
    EXPECT_EQ(f.blocks_missing(), 1u);
  }
  Result r = run(c, dir);
  EXPECT_EQ(malloc_sizes(r.events), (std::vector<uint64_t>{1, 3}));
  expect_anomalies(r.rep, {.blocks_missing = 1});
}

TEST(RawFile, MissingFirstBlocksAreCounted) {
  TempDir dir;
  Capture c;
  c.map(0, block(0, 3, {rec(Op::malloc, 1030, 0x3000, 3)}));
  RawFile f(c.write(dir));
  EXPECT_EQ(f.blocks_missing(), 3u);
}

TEST(RawFile, CutOffBlocksFileReadsTheWholeBlocks) {
  TempDir dir;
  Capture c;
  c.appended.push_back(block(0, 0, {rec(Op::malloc, 1010, 0x1000, 1)}));
  c.appended.push_back(block(0, 1, {rec(Op::malloc, 1020, 0x2000, 2)}));
  // The append of seq 2 was cut off; the mapping still has it whole.
  c.appended_tail = block(0, 2, {rec(Op::malloc, 1030, 0x3000, 777)}).bytes().substr(0, 5000);
  c.map(0, block(0, 2, {rec(Op::malloc, 1030, 0x3000, 3)}));
  std::string path = c.write(dir);
  {
    RawFile f(path);
    EXPECT_EQ(f.blocks(), 3u);
    EXPECT_EQ(f.blocks_missing(), 0u);
  }
  Result r = run(c, dir);
  EXPECT_EQ(malloc_sizes(r.events), (std::vector<uint64_t>{1, 2, 3}));
  expect_anomalies(r.rep, {});
}

TEST(RawFile, CutOffBlocksFileWithoutMappedCopy) {
  TempDir dir;
  Capture c;
  c.appended.push_back(block(0, 0, {rec(Op::malloc, 1010, 0x1000, 1)}));
  c.appended_tail = std::string(100, '\x55');
  c.slots.resize(1);  // slot 0's mapped block is zero
  std::string path = c.write(dir);
  RawFile f(path);
  EXPECT_EQ(f.blocks(), 1u);
  Result r = run(c, dir);
  EXPECT_EQ(malloc_sizes(r.events), (std::vector<uint64_t>{1}));
}

// ===================================================================== 8. errors

TEST(RawFile, MissingBlocksFileIsFine) {
  TempDir dir;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1010, 0x1000, 8)});
  std::string path = c.write(dir);
  ASSERT_FALSE(std::filesystem::exists(path + ".blocks"));
  RawFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.blocks(), 1u);
  EXPECT_EQ(f.threads().size(), 1u);
}

TEST(RawFile, NoThreadsAtAll) {
  TempDir dir;
  Capture c;
  c.flags = 0;
  Result r = run(c, dir);
  EXPECT_TRUE(r.events.empty());
  EXPECT_EQ(r.rep.threads, 0u);
  EXPECT_EQ(r.rep.events, 0u);
  EXPECT_EQ(r.rep.duration_ns, 0u);
  EXPECT_FALSE(r.rep.clean_exit);
}

TEST(RawFile, Errors) {
  TempDir dir;
  std::string path = dir.file("4321.0.hlraw");
  EXPECT_EQ(raw_error(path), path + ": No such file or directory");

  trace::testutil::write_file(path, std::string(100, '\0'));
  EXPECT_EQ(raw_error(path), path + ": not a heaplab raw capture (file too short: 100 bytes)");
  trace::testutil::write_file(path, "");
  EXPECT_EQ(raw_error(path), path + ": not a heaplab raw capture (file too short: 0 bytes)");

  auto with = [&](auto change) {
    Capture c;
    c.thread(0, {rec(Op::malloc, 1010, 0x1000, 8)});
    change(c);
    return raw_error(c.write(dir));
  };
  EXPECT_EQ(with([](Capture&) {}), "(no error)");
  EXPECT_EQ(with([](Capture& c) { c.magic[7] = 'X'; }), path + ": not a heaplab raw capture (bad magic)");
  EXPECT_EQ(with([](Capture& c) { c.version = 2; }),
            path + ": unsupported raw capture version 2 (this heaplab reads 1)");
  EXPECT_EQ(with([](Capture& c) { c.version = 0; }),
            path + ": unsupported raw capture version 0 (this heaplab reads 1)");
  const std::string layout = path + ": raw capture has an unexpected block layout";
  EXPECT_EQ(with([](Capture& c) { c.header_size = 4096; }), layout);
  EXPECT_EQ(with([](Capture& c) { c.block_size = 131072; }), layout);
  EXPECT_EQ(with([](Capture& c) { c.record_size = 16; }), layout);
  EXPECT_EQ(with([](Capture& c) { c.clock = 3; }), path + ": raw capture names an unknown clock 3");
  EXPECT_EQ(with([](Capture& c) { c.clock = 0; }), path + ": raw capture names an unknown clock 0");
  EXPECT_EQ(with([](Capture& c) { c.clock = raw::kClockTsc; }), "(no error)");
}

// In a death-test child: opens `path` (a file of `file_size` bytes) with the
// pages after the reader's mapping of it inaccessible, so that a read past
// its end faults instead of reading whatever is mapped there. Mappings go
// top-down into the highest gap that fits: reserve 1 MiB, free its first
// pages, and fill every higher gap of that size until a mapping of it lands
// in the hole. Exits 0 when the file opens (with no threads) or is rejected
// with RawError, 2 when it yields threads; 0 too when the guard cannot be
// arranged (nothing to check then).
[[noreturn]] void open_with_guard_pages(const std::string& path, uint64_t file_size) {
  const size_t len = (file_size + 4095) / 4096 * 4096;
  void* res = mmap(nullptr, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (res == MAP_FAILED || munmap(res, len) != 0) std::_Exit(0);
  bool arranged = false;
  for (int i = 0; i < 100000 && !arranged; ++i) {
    void* probe = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED) break;
    if (probe == res) {
      munmap(probe, len);
      arranged = true;
    }
  }
  if (!arranged) std::_Exit(0);
  try {
    RawFile f(path);
    if (!f.threads().empty()) std::_Exit(2);  // there is no block to read
  } catch (const RawError&) {
  }
  std::_Exit(0);
}

// A file that ends inside the header block (longer than FileHeader, shorter
// than kBlockSize) with a thread slot handed out: the reader must not read a
// mapped block past the end of the file.
TEST(RawFileDeathTest, FileEndingInsideTheHeaderBlockDoesNotCrash) {
  TempDir dir;
  const uint64_t size = sizeof(raw::FileHeader) + 100;
  const std::string path = dir.file("4321.0.hlraw");
  Capture c;
  // Control: no thread slot, so nothing past the header is read.
  c.next_thread = 0;
  trace::testutil::write_file(path, c.header_bytes().substr(0, size));
  EXPECT_EXIT(open_with_guard_pages(path, size), testing::ExitedWithCode(0), "");
  c.next_thread = 1;
  trace::testutil::write_file(path, c.header_bytes().substr(0, size));
  EXPECT_EXIT(open_with_guard_pages(path, size), testing::ExitedWithCode(0), "");
}

// ===================================================================== 9. time

TEST(Normalise, SignalHandlerRecordStampedEarlierNeverGoesBackInTime) {
  TempDir dir;
  const uint64_t A = 0x1000, B = 0x2000;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1100, A, 1), rec(Op::malloc, 1090, B, 2),  // from a signal handler
               rec(Op::free, 1110, A), rec(Op::free, 1105, B)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 100),
                              X(Op::malloc, 100).id(1).size(1),
                              X(Op::malloc, 100).id(2).size(2),
                              X(Op::free, 110).old(1),
                              X(Op::free, 110).old(2),
                              X(Op::thread_end, 110),
                          });
  expect_anomalies(r.rep, {});
}

TEST(Normalise, OutOfOrderTicksWithTwoThreadsNeverDecrease) {
  TempDir dir;
  Capture c;
  c.thread(0, {rec(Op::malloc, 1100, 0x1000, 1), rec(Op::malloc, 1090, 0x2000, 2), rec(Op::free, 1130, 0x1000)});
  c.thread(1, {rec(Op::malloc, 1095, 0x3000, 3), rec(Op::malloc, 1092, 0x4000, 4), rec(Op::free, 1120, 0x2000)});
  Result r = run(c, dir);
  expect_times_never_decrease(r.events);
  EXPECT_EQ(malloc_sizes(r.events), (std::vector<uint64_t>{3, 4, 1, 2}));
  expect_anomalies(r.rep, {});
  EXPECT_EQ(r.rep.calls, 6u);
  EXPECT_EQ(r.rep.duration_ns, 35u);
}

TEST(Normalise, TicksUnwrapAcrossThe56BitMask) {
  // start_ticks above 2^56: records hold the low 56 bits only.
  TempDir dir;
  Capture c;
  c.start_ticks = (uint64_t{1} << 56) + 1000;
  c.thread(0, {rec(Op::malloc, c.start_ticks + 10, 0x1000, 1), rec(Op::free, c.start_ticks + 20, 0x1000)});
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 10),
                              X(Op::malloc, 10).id(1).size(1),
                              X(Op::free, 20).old(1),
                              X(Op::thread_end, 20),
                          });
}

// TSC: a record stamped a few ticks before the header's start (an unfenced
// read on another CPU) is at time 0, not 2^56 ticks later.
TEST(Normalise, RecordStampedJustBeforeStartIsAtTimeZero) {
  TempDir dir;
  Capture c;
  c.clock = raw::kClockTsc;
  c.start_ticks = 1000;
  c.start_mono_ns = 5000000;
  c.end_ticks = 1000 + 2000000;  // 1 ns per tick
  c.end_mono_ns = 5000000 + 2000000;
  c.thread(0, {rec(Op::malloc, 995, 0x1000, 1), rec(Op::free, 1010, 0x1000)});
  Result r = run(c, dir);
  EXPECT_EQ(r.rep.clock, "tsc");
  expect_events(r.events, {
                              X(Op::thread_start, 0),
                              X(Op::malloc, 0).id(1).size(1),
                              X(Op::free, 10).old(1),
                              X(Op::thread_end, 10),
                          });
}

TEST(Normalise, TscRateFromClockPairs) {
  TempDir dir;
  Capture c;
  c.clock = raw::kClockTsc;
  c.start_ticks = 1000;
  c.start_mono_ns = 5000000;
  c.end_ticks = 1000 + 4000000;  // 4 ticks per ns
  c.end_mono_ns = 5000000 + 1000000;
  c.thread(0, {rec(Op::malloc, 1400, 0x1000, 1), rec(Op::free, 1800, 0x1000)});
  std::string path = c.write(dir);
  {
    RawFile f(path);
    EXPECT_DOUBLE_EQ(f.ns_per_tick(), 0.25);
  }
  Result r = run(c, dir);
  expect_events(r.events, {
                              X(Op::thread_start, 100),
                              X(Op::malloc, 100).id(1).size(1),
                              X(Op::free, 200).old(1),
                              X(Op::thread_end, 200),
                          });
}

TEST(Normalise, TscWithoutUsablePairsUsesFallbackOrNoTime) {
  TempDir dir;
  Capture c;
  c.clock = raw::kClockTsc;
  c.thread(0, {rec(Op::malloc, 1400, 0x1000, 1), rec(Op::free, 1800, 0x1000)});
  {
    Result r = run(c, dir);
    EXPECT_EQ(r.rep.clock, "none");
    EXPECT_FALSE(r.reader->has_time());
    for (const Event& e : r.events) EXPECT_EQ(e.time, 0u);
  }
  NormaliseOptions opt;
  opt.fallback_ns_per_tick = 0.5;
  Result r = run(c, dir, opt);
  EXPECT_EQ(r.rep.clock, "tsc");
  expect_events(r.events, {
                              X(Op::thread_start, 200),
                              X(Op::malloc, 200).id(1).size(1),
                              X(Op::free, 400).old(1),
                              X(Op::thread_end, 400),
                          });
}

}  // namespace
}  // namespace heaplab::normalise

namespace heaplab::normalise {
namespace {

// Events are written on a second thread: its write errors still reach the
// caller as one exception, and nothing hangs.
TEST(Normalise, WriteErrorOnTheWriterThreadIsReported) {
  TempDir dir;
  Capture c;
  std::vector<raw::Record> recs;
  for (uint64_t i = 0; i < 2000; ++i) recs.push_back(rec(Op::malloc, 1010 + i, 0x1000 + 16 * i, 8));
  c.thread(0, recs);
  std::string path = c.write(dir);
  RawFile f(path);
  NormaliseOptions opt;
  opt.chunk_events = 16;  // many chunks: the writer thread writes (and fails) early
  opt.codec = trace::kCodecNone;
  const std::string out = dir.file("out.hlt");
  // In a child: a 16 KiB file-size limit lets the writer create the trace,
  // then makes a later chunk write on the writer thread fail (EFBIG).
  auto child = [&] {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {16384, 16384};
    setrlimit(RLIMIT_FSIZE, &lim);
    try {
      normalise::normalise(f, out, opt);
    } catch (const trace::TraceError& e) {
      std::fprintf(stderr, "caught: %s\n", e.what());
      std::_Exit(0);
    }
    std::_Exit(1);
  };
  EXPECT_EXIT(child(), testing::ExitedWithCode(0), "caught: .*out.hlt.*");
}

}  // namespace
}  // namespace heaplab::normalise
