#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "capture/format/address_block.h"
#include "capture/format/bytes.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"

namespace heaplab::trace {
namespace {

using testutil::chunk_payloads;
using testutil::generate;
using testutil::read_all;
using testutil::read_file;
using testutil::TempDir;
using testutil::write_file;
using testutil::write_trace;

// ------------------------------------------------------------ zigzag

TEST(Zigzag, RoundTrip) {
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{-1}, INT64_MAX, INT64_MIN, int64_t{-12345}})
    EXPECT_EQ(bytes::unzigzag(bytes::zigzag(v)), v);
  EXPECT_EQ(bytes::zigzag(-1), 1u);
  EXPECT_EQ(bytes::zigzag(1), 2u);
}

// ------------------------------------------------------------ round trips

struct RoundTripCase {
  uint32_t threads;
  uint32_t chunk;
  Codec codec;
  bool timestamps;
};

class RoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTrip, EveryEventComesBackExactly) {
  const RoundTripCase& c = GetParam();
  TempDir dir;
  for (uint64_t seed : {1u, 2u, 3u}) {
    testutil::GenOptions g;
    g.threads = c.threads;
    g.timestamps = c.timestamps;
    std::vector<Event> expected = generate(seed * 7919 + c.threads, 3000, g);
    std::vector<Event> written = expected;
    WriterOptions opt;
    opt.chunk_events = c.chunk;
    opt.codec = c.codec;
    opt.level = c.codec == kCodecZstd ? 3 : 1;
    opt.timestamps = c.timestamps;
    const std::string path = dir.file("t.hlt");
    write_trace(path, written, opt);
    // The writer numbered seq and ids exactly as the generator predicted.
    ASSERT_EQ(written, expected);

    auto r = TraceReader::open(path);
    ASSERT_TRUE(r->complete());
    EXPECT_EQ(r->event_count(), expected.size());
    EXPECT_EQ(r->has_time(), c.timestamps);
    std::vector<Event> back = read_all(*r);
    ASSERT_EQ(back.size(), expected.size());
    for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], expected[i]) << "event " << i;

    // Per-thread cursors give each thread's events in order.
    for (uint32_t t : r->active_threads()) {
      std::vector<Event> mine;
      for (const Event& e : expected)
        if (e.thread == t) mine.push_back(e);
      ThreadCursor cur(*r, t);
      std::vector<Event> got, buf(64);
      while (size_t n = cur.next(buf.data(), buf.size())) got.insert(got.end(), buf.begin(), buf.begin() + n);
      ASSERT_EQ(got, mine) << "thread " << t;
      EXPECT_EQ(r->thread_event_count(t), mine.size());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Format, RoundTrip,
                         ::testing::Values(RoundTripCase{1, 65536, kCodecZstd, false},
                                           RoundTripCase{1, 1, kCodecNone, true}, RoundTripCase{4, 7, kCodecLz4, true},
                                           RoundTripCase{4, 100, kCodecZstd, true},
                                           RoundTripCase{17, 33, kCodecNone, false},
                                           RoundTripCase{64, 5, kCodecZstd, true},
                                           RoundTripCase{3, 1000, kCodecLz4, false}),
                         [](const auto& param_info) {
                           const RoundTripCase& c = param_info.param;
                           return "t" + std::to_string(c.threads) + "_chunk" + std::to_string(c.chunk) + "_" +
                                  (c.codec == kCodecNone  ? "none"
                                   : c.codec == kCodecLz4 ? "lz4"
                                                          : "zstd") +
                                  (c.timestamps ? "_time" : "");
                         });

TEST(RoundTripValues, ExtremeValuesSurvive) {
  TempDir dir;
  std::vector<Event> ev;
  auto add = [&](Event e) { ev.push_back(e); };
  add({.time = UINT64_MAX, .size = UINT64_MAX, .thread = 0, .op = Op::malloc});
  add({.time = 0, .size = uint64_t{1} << 63, .count = UINT64_MAX, .thread = 5, .op = Op::calloc});
  add({.time = 1, .old = 1, .size = 0, .align = UINT64_MAX, .thread = 1 << 20, .op = Op::op_delete_sized_aligned});
  add({.time = 2, .size = 7, .align = uint64_t{1} << 63, .thread = 0, .op = Op::aligned_alloc});
  add({.time = 3, .old = 3, .size = 1, .count = uint64_t{1} << 62, .thread = 3, .op = Op::reallocarray});
  add({.time = 4, .size = 99, .thread = 0, .op = Op::malloc, .flags = kFailed});
  add({.time = 5, .old = 0, .thread = 0, .op = Op::free});
  add({.time = 6, .count = UINT64_MAX, .thread = 2, .op = Op::lost});
  WriterOptions opt;
  opt.timestamps = true;
  std::vector<Event> written = ev;
  write_trace(dir.file("x.hlt"), written, opt);
  auto r = TraceReader::open(dir.file("x.hlt"));
  std::vector<Event> back = read_all(*r);
  ASSERT_EQ(back, written);
  EXPECT_EQ(back[0].id, 1u);
  EXPECT_EQ(back[1].id, 2u);
  EXPECT_EQ(back[2].old, 1u);
  EXPECT_EQ(back[4].id, 4u);  // reallocarray of object 3 produced object 4
  EXPECT_EQ(back[5].id, 0u);  // failed malloc: no object
  EXPECT_EQ(back[5].flags, kFailed | kNullResult);
  EXPECT_EQ(back[7].count, UINT64_MAX);
  EXPECT_EQ(r->thread_count(), (1u << 20) + 1);
  EXPECT_EQ(r->active_threads(), (std::vector<uint32_t>{0, 2, 3, 5, 1u << 20}));
}

TEST(Writer, NormalisesFieldsTheOpDoesNotCarry) {
  TempDir dir;
  TraceWriter w(dir.file("n.hlt"), {});
  Event e{.id = 77, .old = 55, .size = 8, .align = 16, .count = 3, .op = Op::malloc};
  EXPECT_EQ(w.append(e), 1u);
  EXPECT_EQ(e.old, 0u);
  EXPECT_EQ(e.align, 0u);
  EXPECT_EQ(e.count, 0u);
  Event f{.time = 99, .id = 5, .old = 1, .size = 8, .op = Op::free, .flags = kFailed};
  EXPECT_EQ(w.append(f), 0u);
  EXPECT_EQ(f.size, 0u);
  EXPECT_EQ(f.flags, 0);
  EXPECT_EQ(f.time, 0u);  // the writer has no clock
  EXPECT_EQ(f.seq, 1u);
  w.close();
}

TEST(Writer, MetadataAndThreadTable) {
  TempDir dir;
  WriterOptions opt;
  opt.metadata_json = R"({"a":1})";
  {
    TraceWriter w(dir.file("m.hlt"), opt);
    w.set_thread_info(0, {1234, "main"});
    w.set_thread_info(2, {1236, "worker \xe2\x9c\x93"});
    Event e{.size = 1, .thread = 1, .op = Op::malloc};
    w.append(e);
    w.close();
    auto r = TraceReader::open(dir.file("m.hlt"));
    EXPECT_EQ(r->metadata(), R"({"a":1})");
    ASSERT_EQ(r->thread_table().size(), 2u);
    EXPECT_EQ(r->thread_table()[0].first, 0u);
    EXPECT_EQ(r->thread_table()[1].first, 2u);
    EXPECT_EQ(r->thread_info(0), (ThreadInfo{1234, "main"}));
    EXPECT_EQ(r->thread_info(1), ThreadInfo{});
    EXPECT_EQ(r->thread_info(2), (ThreadInfo{1236, "worker \xe2\x9c\x93"}));
    EXPECT_EQ(r->active_threads(), std::vector<uint32_t>{1});
    EXPECT_EQ(r->thread_count(), 2u);  // the largest thread with events, plus one
  }
  {
    TraceWriter w(dir.file("m2.hlt"), opt);
    w.set_final_metadata(R"({"a":2})");
    w.close();
    auto r = TraceReader::open(dir.file("m2.hlt"));
    EXPECT_EQ(r->metadata(), R"({"a":2})");
    EXPECT_EQ(r->event_count(), 0u);
    EXPECT_TRUE(read_all(*r).empty());
  }
}

// Thread information given in any order, and again for a thread described
// already: the table comes out ascending, each thread once, as last given.
// A thread's thread_end, from its last chunk (here of its own: chunks of
// two events), or none: a thread whose last event is another, a thread
// without events.
TEST(Reader, ThreadEndSeq) {
  TempDir dir;
  std::vector<Event> ev = {testutil::alloc(8, 0),          testutil::ev(Op::thread_start, 1), testutil::alloc(16, 1),
                           testutil::release(2, 0),        testutil::ev(Op::thread_end, 1),   testutil::alloc(24, 0),
                           testutil::ev(Op::thread_end, 2)};
  WriterOptions wo;
  wo.chunk_events = 2;
  write_trace(dir.file("t.hlt"), ev, wo);
  auto r = TraceReader::open(dir.file("t.hlt"));
  ASSERT_EQ(r->thread_chunks(1).size(), 2u);  // (its thread_end alone in the last)
  EXPECT_EQ(r->thread_end_seq(1), 4u);
  EXPECT_EQ(r->thread_end_seq(2), 6u);
  EXPECT_EQ(r->thread_end_seq(0), UINT64_MAX);
  EXPECT_EQ(r->thread_end_seq(7), UINT64_MAX);
}

TEST(Writer, ThreadInfoInAnyOrderAndGivenAgain) {
  TempDir dir;
  {
    TraceWriter w(dir.file("t.hlt"), {});
    w.set_thread_info(5, {105, "five"});
    w.set_thread_info(2, {102, "two"});
    w.set_thread_info(9, {109, "nine"});
    w.set_thread_info(2, {202, "two, renamed"});
    w.set_thread_info(0, {100, ""});
    w.set_thread_info(9, {209, "nine, renamed"});
    w.set_thread_info(7, {107, "seven"});
    w.close();
  }
  auto r = TraceReader::open(dir.file("t.hlt"));
  const std::vector<std::pair<uint32_t, ThreadInfo>> want{
      {0, {100, ""}}, {2, {202, "two, renamed"}}, {5, {105, "five"}}, {7, {107, "seven"}}, {9, {209, "nine, renamed"}}};
  EXPECT_EQ(r->thread_table(), want);
}

TEST(Writer, HugeThreadIndicesCostOnlyWhatIsUsed) {
  // Two events on threads 3 and 2^24 - 1: the file stays small and the
  // reader lists only the threads that have events.
  TempDir dir;
  {
    TraceWriter w(dir.file("h.hlt"), {});
    Event a{.size = 8, .thread = (1u << 24) - 1, .op = Op::malloc};
    Event b{.old = 1, .thread = 3, .op = Op::free};
    w.append(a);
    w.append(b);
    w.set_thread_info((1u << 24) - 1, {77, "last"});
    w.close();
  }
  auto r = TraceReader::open(dir.file("h.hlt"));
  EXPECT_LT(r->file_size(), 1000u);
  EXPECT_EQ(r->thread_count(), 1u << 24);
  EXPECT_EQ(r->active_threads(), (std::vector<uint32_t>{3, (1u << 24) - 1}));
  EXPECT_TRUE(r->thread_chunks(4).empty());
  EXPECT_EQ(r->thread_info((1u << 24) - 1), (ThreadInfo{77, "last"}));
  std::vector<Event> back = read_all(*r);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].thread, (1u << 24) - 1);
  EXPECT_EQ(back[1].thread, 3u);
}

// A program that starts threads over and over: each thread's state in the
// writer goes once its thread_end is written, and every event comes back.
// Ten threads open at once end in a scattered order (the writer's list of
// open threads is mended by moving its last entry into the gap); an event
// of a thread right after its own thread_end (not what a capture writes,
// but the format allows it) starts a fresh encoder and comes back too.
TEST(Writer, AnEndedThreadsStateIsFreed) {
  TempDir dir;
  constexpr uint32_t kThreads = 5000;
  std::vector<Event> expected;
  {
    TraceWriter w(dir.file("t.hlt"), {});
    uint64_t time = 0;
    auto put = [&](Event e) {
      e.time = time += 3;
      w.append(e);
      expected.push_back(e);
    };
    for (uint32_t t = 0; t < kThreads; ++t) {
      put({.thread = t, .op = Op::thread_start});
      put({.size = 16 + t % 100, .thread = t, .op = Op::malloc});
      put({.old = w.objects(), .thread = t, .op = Op::free});
      if (t % 7 == 0) put({.size = 24, .thread = t, .op = Op::malloc});  // left live
      put({.thread = t, .op = Op::thread_end});
      EXPECT_EQ(w.open_threads(), 0u) << "thread " << t;
    }
    // Ten at once, on thread indices past those.
    constexpr uint32_t kBase = kThreads;
    for (uint32_t round = 0; round < 3; ++round)
      for (uint32_t t = kBase; t < kBase + 10; ++t) put({.size = 8 + round, .thread = t, .op = Op::malloc});
    EXPECT_EQ(w.open_threads(), 10u);
    size_t open = 10;
    bool ended[10] = {};
    for (uint32_t i : {0u, 5u, 9u, 2u, 7u, 1u, 8u, 3u, 6u, 4u}) {
      const uint32_t t = kBase + i;
      put({.old = w.objects(), .thread = t, .op = Op::free});  // the newest object, perhaps another's
      put({.thread = t, .op = Op::thread_end});
      ended[i] = true;
      EXPECT_EQ(w.open_threads(), --open) << "after thread " << t << " ended";
      if (i % 3 == 0) {  // the same thread again at once: a fresh encoder
        put({.size = 100 + i, .thread = t, .op = Op::malloc});
        EXPECT_EQ(w.open_threads(), ++open);
        put({.old = w.objects(), .thread = t, .op = Op::free});
        put({.thread = t, .op = Op::thread_end});
        EXPECT_EQ(w.open_threads(), --open);
      }
      // Every thread still open takes an event (its encoder is where the
      // list of open threads says).
      for (uint32_t j = 0; j < 10; ++j)
        if (!ended[j]) put({.size = 1, .thread = kBase + j, .op = Op::malloc});
    }
    EXPECT_EQ(w.open_threads(), 0u);
    w.close();
  }
  auto r = TraceReader::open(dir.file("t.hlt"));
  EXPECT_EQ(r->active_threads().size(), size_t{kThreads} + 10);
  EXPECT_EQ(read_all(*r), expected);
}

// The align and count columns are staged only once a thread has a value
// for either: one that comes midway through a chunk (after the staging
// arrays grew past it) reads back with zeros before it, in that chunk and
// in the next; thread 1's first one comes in a later chunk; thread 2's on
// its first event; thread 3 never has one; thread 0 ends (its arrays given
// back, the columns with them) and starts again without one, then with one.
TEST(Writer, AlignAndCountFirstSeenMidwayThroughAChunk) {
  TempDir dir;
  std::vector<Event> expected;
  {
    WriterOptions opt;
    opt.chunk_events = 1000;
    TraceWriter w(dir.file("r.hlt"), opt);
    auto add = [&](Event e) {
      w.append(e);
      expected.push_back(e);
    };
    add({.size = 8, .count = 2, .thread = 2, .op = Op::calloc});
    for (uint32_t k = 0; k < 2500; ++k) {
      add({.size = 16 + k % 7, .thread = 0, .op = Op::malloc});
      add({.size = 24, .thread = 1, .op = Op::malloc});
      add({.size = 32, .thread = 2, .op = Op::malloc});
      add({.size = 40, .thread = 3, .op = Op::malloc});
      if (k == 300) add({.size = 64, .align = 64, .thread = 0, .op = Op::aligned_alloc});
      if (k == 301) add({.size = 8, .count = 5, .thread = 0, .op = Op::calloc});
      if (k == 1700) add({.size = 4, .count = 3, .thread = 1, .op = Op::calloc});
    }
    add({.thread = 0, .op = Op::thread_end});
    for (uint32_t k = 0; k < 50; ++k) add({.size = 48, .thread = 0, .op = Op::malloc});
    add({.size = 16, .align = 4096, .thread = 0, .op = Op::aligned_alloc});
    add({.size = 48, .thread = 0, .op = Op::malloc});
    w.close();
  }
  auto r = TraceReader::open(dir.file("r.hlt"));
  EXPECT_EQ(read_all(*r), expected);
}

// Many threads of a few events each, none ended, past the writer's staging
// budget (about 590,000 events). Threads at five rates: the fastest hold
// the most when the budget is passed and are written early, so the file's
// first chunk is one of theirs (without the early writes every chunk would
// come at close(), thread 0's first, one of the slowest). Every event comes
// back in order. (That the early writes scan the threads once per quarter
// budget, not once per chunk, is a cost: scripts/bench-capture-live.py
// --programs 100k measures it.)
TEST(Writer, ManySmallThreadsPastTheStagingBudget) {
  TempDir dir;
  constexpr uint32_t kThreads = 20000, kRounds = 8;
  auto rate = [](uint32_t t) { return t % 5 + 1; };  // malloc/free pairs a round
  std::vector<Event> expected;
  {
    TraceWriter w(dir.file("m.hlt"), {});
    uint64_t time = 0;
    for (uint32_t round = 0; round < kRounds; ++round)
      for (uint32_t t = 0; t < kThreads; ++t)
        for (uint32_t k = 0; k < rate(t); ++k) {
          Event m{.time = time += 2, .size = 8 + round, .thread = t, .op = Op::malloc};
          w.append(m);
          expected.push_back(m);
          Event f{.time = time += 2, .old = w.objects(), .thread = t, .op = Op::free};
          w.append(f);
          expected.push_back(f);
        }
    EXPECT_EQ(w.open_threads(), size_t{kThreads});
    w.close();
  }
  auto r = TraceReader::open(dir.file("m.hlt"));
  ASSERT_FALSE(r->chunks().empty());
  EXPECT_EQ(rate(r->chunks().front().thread), 5u) << "first chunk: thread " << r->chunks().front().thread;
  EXPECT_GT(r->chunks().size(), size_t{kThreads});  // some threads' chunks early, and all at close
  EXPECT_EQ(read_all(*r), expected);
}

// count_heap_peak: the most requested bytes live at once, as plan building
// counts them (plan_test's PlanLive.TheWritersPeakIsThePlans compares the
// two on random traces): calloc's and reallocarray's count times size
// (saturating), a realloc's old object going as its new one comes (also
// realloc(p, 0) returning NULL), a failed realloc keeping its object, a
// NULL result making nothing, free(NULL) and a second free of the same
// object taking nothing, and an object still live far behind the ring of
// recent ids (300,000 objects made after it) freed at the end.
TEST(Writer, CountsTheLiveHeapsPeak) {
  TempDir dir;
  WriterOptions o;
  o.count_heap_peak = true;
  TraceWriter w(dir.file("p.hlt"), o);
  uint64_t peaks = 0;
  auto add = [&](Event e, uint64_t peak) {
    w.append(e);
    EXPECT_EQ(w.heap_live_peak(), peak) << "event " << e.seq;
    ++peaks;
  };
  add({.size = 100, .op = Op::malloc}, 100);                                  // 1: 100 live
  add({.size = 10, .count = 3, .op = Op::calloc}, 130);                       // 2: 130
  add({.old = 1, .size = 400, .op = Op::realloc}, 430);                       // 3 for 1: 430
  add({.old = 3, .size = 5000, .op = Op::realloc, .flags = kFailed}, 430);    // 3 kept
  add({.size = 1 << 20, .op = Op::malloc, .flags = kNullResult}, 430);        // nothing made
  add({.old = 0, .op = Op::free}, 430);                                       // free(NULL)
  add({.old = 3, .op = Op::free}, 430);                                       // 30 live
  add({.old = 3, .op = Op::free}, 430);                                       // freed twice
  add({.size = 1000, .op = Op::op_new}, 1030);                                // 4: 1030
  add({.old = 0, .size = 50, .op = Op::realloc}, 1080);                       // 5, realloc(NULL): 1080
  add({.old = 5, .size = 0, .op = Op::realloc, .flags = kNullResult}, 1080);  // realloc(5, 0): 1030
  add({.old = 2, .size = 10, .count = 4, .op = Op::reallocarray}, 1080);      // 6 for 2: 1040
  for (int i = 0; i < 300000; ++i) {
    Event m{.size = 1, .op = Op::malloc};
    w.append(m);
    Event f{.old = w.objects(), .op = Op::free};
    w.append(f);
  }
  EXPECT_EQ(w.heap_live_peak(), 1080u);
  add({.old = 4, .op = Op::op_delete}, 1080);  // 40 live
  add({.size = 1050, .op = Op::malloc}, 1090);
  add({.size = UINT64_MAX / 2, .count = 3, .op = Op::calloc}, UINT64_MAX);  // saturates
  w.close();
  EXPECT_EQ(peaks, 15u);
  // The most objects live at once: 2, 4 and 5 after realloc(NULL); 4, 6
  // and each of the 300,000 before it is freed; 6, 7 and the calloc.
  EXPECT_EQ(w.live_objects_peak(), 3u);
  // Off by default.
  TraceWriter plain(dir.file("q.hlt"), {});
  Event e{.size = 100, .op = Op::malloc};
  plain.append(e);
  EXPECT_EQ(plain.heap_live_peak(), 0u);
  EXPECT_EQ(plain.live_objects_peak(), 0u);
}

TEST(Writer, RejectsObjectsThatDoNotExistYet) {
  TempDir dir;
  TraceWriter w(dir.file("e.hlt"), {});
  Event e{.old = 1, .op = Op::free};
  try {
    w.append(e);
    FAIL();
  } catch (const TraceError& err) {
    EXPECT_EQ(std::string(err.what()), dir.file("e.hlt") +
                                           ": event 0: free of object 1, which does not exist "
                                           "yet (last id 0)");
  }
  Event bad{.op = static_cast<Op>(kOpCount)};
  EXPECT_THROW(w.append(bad), TraceError);
}

TEST(Writer, UnwritablePathNamesThePath) {
  try {
    TraceWriter w("/nonexistent-dir/x.hlt", {});
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent-dir/x.hlt: cannot create: No such file or directory");
  }
}

TEST(Writer, FlushMakesEventsDurableBeforeClose) {
  TempDir dir;
  const std::string path = dir.file("f.hlt");
  TraceWriter w(path, {});
  for (int i = 0; i < 10; ++i) {
    Event e{.size = 16, .thread = static_cast<uint32_t>(i % 3), .op = Op::malloc};
    w.append(e);
  }
  w.flush();
  // Without close(): the file is a truncated trace with every flushed event.
  auto r = TraceReader::open(path);
  EXPECT_FALSE(r->complete());
  EXPECT_EQ(r->event_count(), 10u);
  EXPECT_EQ(read_all(*r).size(), 10u);
  w.close();
  EXPECT_TRUE(TraceReader::open(path)->complete());
}

// A trace whose level changes between chunks (live capture compresses
// faster while the program keeps every core busy) reads back exactly; each
// chunk is the one a writer at its level throughout writes; levels out of
// range are refused.
TEST(Writer, SetLevelAppliesToLaterChunks) {
  TempDir dir;
  testutil::GenOptions g;
  g.threads = 1;
  const std::vector<Event> expected = generate(5, 40000, g);
  uint64_t at1 = 0, at19 = 0;
  auto write = [&](const std::string& name, int first, int second) {
    WriterOptions opt;
    opt.chunk_events = 4096;
    opt.level = first;
    opt.timestamps = true;
    TraceWriter w(dir.file(name), opt);
    for (size_t i = 0; i < expected.size(); ++i) {
      if (i == 4096) w.set_level(second);  // the first chunk is full and written: the rest take `second`
      Event e = expected[i];
      w.append(e);
    }
    w.close();
    at1 = w.events_at_level(1);  // (the last call's: the mixed trace's)
    at19 = w.events_at_level(19);
    return read_file(dir.file(name));
  };
  const std::string fast = write("fast.hlt", 1, 1), slow = write("slow.hlt", 19, 19);
  const std::string mixed = write("mixed.hlt", 1, 19);
  EXPECT_EQ(at1, 4096u);
  EXPECT_EQ(at19, expected.size() - 4096);
  for (const char* name : {"fast.hlt", "slow.hlt", "mixed.hlt"}) {
    auto r = TraceReader::open(dir.file(name));
    ASSERT_TRUE(r->complete());
    EXPECT_EQ(read_all(*r), expected) << name;
  }
  const std::vector<std::string> f = chunk_payloads(fast), s = chunk_payloads(slow), m = chunk_payloads(mixed);
  ASSERT_EQ(m.size(), 10u);  // 40,000 events in chunks of 4,096
  ASSERT_EQ(f.size(), m.size());
  ASSERT_EQ(s.size(), m.size());
  EXPECT_EQ(m[0], f[0]);
  EXPECT_NE(m[0], s[0]);  // (the two levels compress differently here)
  for (size_t i = 1; i < m.size(); ++i) EXPECT_EQ(m[i], s[i]) << "chunk " << i;

  TraceWriter w(dir.file("z.hlt"), {});
  try {
    w.set_level(0);
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()), dir.file("z.hlt") + ": zstd level must be between 1 and 22");
  }
  EXPECT_THROW(w.check_level(23), TraceError);
  w.check_level(22);
  WriterOptions lz4;
  lz4.codec = kCodecLz4;
  lz4.level = 1;
  TraceWriter l(dir.file("l.hlt"), lz4);
  try {
    l.set_level(65538);
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()), dir.file("l.hlt") + ": lz4 acceleration must be between 1 and 65537");
  }
}

// ------------------------------------------------------------ bad input

std::string small_trace(const TempDir& dir, std::vector<Event>* out = nullptr, Codec codec = kCodecZstd) {
  testutil::GenOptions g;
  g.threads = 3;
  std::vector<Event> ev = generate(99, 200, g);
  WriterOptions opt;
  opt.chunk_events = 16;
  opt.codec = codec;
  opt.level = 1;
  opt.timestamps = true;
  write_trace(dir.file("s.hlt"), ev, opt);
  if (out) *out = ev;
  return read_file(dir.file("s.hlt"));
}

std::string open_error(const std::string& img) {
  try {
    auto r = TraceReader::from_memory(img, "mem.hlt");
    read_all(*r);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

TEST(BadInput, WrongMagic) {
  TempDir dir;
  std::string img = small_trace(dir);
  img[0] = 'X';
  EXPECT_EQ(open_error(img), "mem.hlt: offset 0: not a heaplab trace (bad magic)");
  EXPECT_EQ(open_error("hello world, this is not a trace at all"),
            "mem.hlt: offset 0: not a heaplab trace (bad magic)");
  EXPECT_EQ(open_error(""), "mem.hlt: empty file, not a heaplab trace");
}

TEST(BadInput, UnknownMajorVersionIsRejectedMinorIsRead) {
  TempDir dir;
  std::string img = small_trace(dir);
  std::string v2 = img;
  v2[8] = 2;
  testutil::repair_checksums(v2);
  EXPECT_EQ(open_error(v2), "mem.hlt: offset 8: unsupported trace format version 2.0 (this heaplab reads version 1.x)");
  std::string minor = img;
  minor[10] = 7;
  testutil::repair_checksums(minor);
  EXPECT_EQ(open_error(minor), "");
  EXPECT_EQ(TraceReader::from_memory(minor, "m")->minor_version(), 7);
}

TEST(BadInput, EveryTruncationReadsACompletePrefixOrFailsCleanly) {
  TempDir dir;
  std::vector<Event> ev;
  const std::string img = small_trace(dir, &ev);
  size_t readable = 0;
  for (size_t cut = 0; cut < img.size(); ++cut) {
    const std::string part = img.substr(0, cut);
    std::unique_ptr<TraceReader> r;
    try {
      r = TraceReader::from_memory(part, "cut.hlt");
    } catch (const TraceError& e) {
      // Only a cut inside the header or the first metadata block may fail.
      EXPECT_LT(cut, kFileHeaderSize + kBlockHeaderSize + 64) << e.what();
      continue;
    }
    ++readable;
    EXPECT_FALSE(r->complete()) << cut;
    EXPECT_NE(r->warning().find("trace is truncated"), std::string::npos) << r->warning();
    std::vector<Event> got = read_all(*r);  // must not throw: complete chunks only
    EXPECT_EQ(got.size(), r->event_count());
    // Each thread's events are a prefix of that thread's original events.
    for (uint32_t t : r->active_threads()) {
      std::vector<Event> mine, orig;
      for (const Event& e : got)
        if (e.thread == t) mine.push_back(e);
      for (const Event& e : ev)
        if (e.thread == t) orig.push_back(e);
      ASSERT_LE(mine.size(), orig.size());
      ASSERT_TRUE(std::equal(mine.begin(), mine.end(), orig.begin())) << "cut " << cut;
    }
  }
  EXPECT_GT(readable, img.size() / 2);
}

TEST(BadInput, TruncationWarningSaysWhatIsLost) {
  TempDir dir;
  const std::string img = small_trace(dir);
  auto full = TraceReader::from_memory(img, "full");
  const ChunkRef& third = full->chunks()[2];
  // Cut in the middle of the third chunk.
  const std::string part = img.substr(0, third.offset + 40);
  auto r = TraceReader::from_memory(part, "cut.hlt");
  EXPECT_EQ(r->chunks().size(), 2u);
  const uint64_t two = full->chunks()[0].events + full->chunks()[1].events;
  EXPECT_EQ(r->warning(),
            "trace is truncated: the block at offset " + std::to_string(third.offset) + " needs " +
                std::to_string(kBlockHeaderSize + (full->chunks()[3].offset - third.offset - kBlockHeaderSize)) +
                " bytes but only 40 bytes remain; read 2 complete chunks with " + std::to_string(two) +
                " events; events after offset " + std::to_string(third.offset) + " are lost");
}

TEST(BadInput, EveryFlippedByteIsDetected) {
  TempDir dir;
  for (Codec codec : {kCodecZstd, kCodecNone}) {
    const std::string img = small_trace(dir, nullptr, codec);
    for (size_t i = 0; i < img.size(); ++i) {
      std::string bad = img;
      bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
      const std::string err = open_error(bad);
      ASSERT_FALSE(err.empty()) << "flip at " << i << " went unnoticed";
      ASSERT_EQ(err.rfind("mem.hlt: ", 0), 0u) << err;
      ASSERT_EQ(err.find('\n'), std::string::npos) << err;
    }
  }
}

TEST(BadInput, CorruptChunkErrorNamesItsOffset) {
  TempDir dir;
  std::string img = small_trace(dir);
  auto r = TraceReader::from_memory(img, "x");
  const uint64_t off = r->chunks()[1].offset;
  img[off + kBlockHeaderSize + kChunkHeaderSize + 2] ^= 0x55;
  EXPECT_EQ(open_error(img), "mem.hlt: offset " + std::to_string(off) + ": chunk: checksum mismatch (corrupt data)");
}

TEST(BadInput, CorruptPayloadWithValidChecksumsIsCaughtByTheDecoder) {
  // Checksums repaired after damage: the decoders' own checks must hold.
  TempDir dir;
  for (Codec codec : {kCodecNone, kCodecLz4, kCodecZstd}) {
    const std::string img = small_trace(dir, nullptr, codec);
    auto r = TraceReader::from_memory(img, "x");
    std::mt19937_64 rng(5);
    for (int round = 0; round < 3000; ++round) {
      std::string bad = img;
      const ChunkRef& c = r->chunks()[rng() % r->chunks().size()];
      const size_t len = (r->chunks().back().offset == c.offset ? 64 : 64);
      const size_t pos = c.offset + kBlockHeaderSize + (rng() % (kChunkHeaderSize + len));
      if (pos >= bad.size()) continue;
      bad[pos] = static_cast<char>(rng());
      testutil::repair_checksums(bad);
      (void)open_error(bad);  // any outcome but a crash or sanitizer report
    }
  }
}

// Format 1.1: the MEMX block comes back exactly, the file says 1.1 (and a
// file without one stays 1.0), and damage anywhere in it is caught.
std::vector<MemoryEvent> some_memory_events() {
  std::vector<MemoryEvent> m;
  m.push_back({MemOp::map, 1, 3, 1000, 1, 0, 1 << 20, 0, 0, 0});
  m.push_back({MemOp::touch, 1, 3, 1000, 1, 0, 1 << 20, 17, 0, 0});
  m.push_back({MemOp::remap, 1, 5, 2000, 1, 0, 1 << 20, 17, 2, 2 << 20});
  m.push_back({MemOp::dontneed, 0, 6, 2500, 2, 4096, 8192, 2, 0, 0});
  m.push_back({MemOp::lazy_free, 0, 6, 2500, 2, 0, 4096, kUnknownPages, 0, 0});
  m.push_back({MemOp::unmap, 0, 7, 3000, 2, 0, 2 << 20, 5, 0, 0});
  m.push_back({MemOp::latency, 0, 7, 0, 0, 0, 41, 0, 0, 0});
  m.push_back({MemOp::object, 0, 0, 0, 2, 0, 65536, 3, 0, 0});
  return m;
}

std::string trace_with_memory(const TempDir& dir, size_t* events_out = nullptr) {
  size_t events = 0;
  const std::string path = dir.file("memx.hlt");
  {
    WriterOptions o;
    o.timestamps = true;
    TraceWriter w(path, o);
    std::vector<Event> ev = generate(7, 40);
    for (Event& e : ev) w.append(e);
    events = ev.size();
    w.set_memory_events(some_memory_events());
    w.close();
  }
  if (events_out) *events_out = events;
  return read_file(path);
}

TEST(MemoryBlock, RoundTripAndVersion) {
  TempDir dir;
  size_t events = 0;
  const std::string img = trace_with_memory(dir, &events);
  auto r = TraceReader::from_memory(img, "memx.hlt");
  EXPECT_EQ(r->minor_version(), 1);
  EXPECT_EQ(r->read_memory_events(), some_memory_events());
  EXPECT_EQ(r->event_count(), events);
  EXPECT_EQ(TraceReader::from_memory(small_trace(dir), "m")->minor_version(), 0);
  EXPECT_TRUE(TraceReader::from_memory(small_trace(dir), "m")->read_memory_events().empty());
  // A truncated 1.1 file (no footer) still finds the block by scanning.
  const std::string cut = img.substr(0, img.size() - 40);
  EXPECT_EQ(TraceReader::from_memory(cut, "cut")->read_memory_events(), some_memory_events());
}

TEST(MemoryBlock, EveryFlippedByteIsDetected) {
  TempDir dir;
  const std::string img = trace_with_memory(dir);
  for (size_t i = 0; i < img.size(); ++i) {
    std::string bad = img;
    bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
    const std::string err = open_error(bad);
    ASSERT_FALSE(err.empty()) << "flip at " << i << " went unnoticed";
    ASSERT_EQ(err.find('\n'), std::string::npos) << err;
  }
}

// Its records are never all held: a reader checks them at open and hands
// them out a batch at a time (MemoryCursor), so a machine with next to no
// memory available reads a block of any length. (Before, a block whose
// records could not fit was refused.)
TEST(MemoryBlock, ReadABatchAtATimeWhateverItsLength) {
  TempDir dir;
  const std::string path = dir.file("long-memx.hlt");
  // 300,000 records: a region mapped, touched and advised over and over
  // (the calls between heap events), timed calls, then objects' counts.
  std::vector<MemoryEvent> want;
  want.push_back({MemOp::map, 0, 0, 0, 1, 0, 1 << 20, 0, 0, 0});
  for (uint64_t i = 0; i < 100000; ++i) {
    want.push_back({MemOp::touch, 0, i, 0, 1, (i % 256) * 4096, 4096, 1, 0, 0});
    want.push_back({MemOp::dontneed, 1, i, 0, 1, (i % 256) * 4096, 4096, 1, 0, 0});
    want.push_back({MemOp::latency, 0, i, 0, 0, 0, 40 + i % 7, 0, 0, 0});
  }
  for (uint64_t id = 1; id <= 1000; ++id) want.push_back({MemOp::object, 0, 0, 0, id * 3, 0, 65536, id % 16, 0, 0});
  {
    TraceWriter w(path, WriterOptions{});
    std::vector<Event> ev = generate(7, 40);
    for (Event& e : ev) w.append(e);
    w.set_memory_events(want);
    w.close();
  }
  setenv("HEAPLAB_MEMORY_AVAILABLE", "1024", 1);
  auto r = TraceReader::open(path);
  unsetenv("HEAPLAB_MEMORY_AVAILABLE");
  EXPECT_EQ(r->memory_event_count(), want.size());
  EXPECT_EQ(r->memory_event_count(MemOp::latency), 100000u);
  EXPECT_EQ(r->memory_event_count(MemOp::object), 1000u);
  EXPECT_EQ(r->memory_event_count(MemOp::map), 1u);
  // Two cursors at once, each on its own, in the order written.
  MemoryCursor a(*r), b(*r);
  size_t i = 0;
  for (const MemoryEvent* e; (e = a.next()) != nullptr; ++i) {
    ASSERT_LT(i, want.size());
    ASSERT_EQ(*e, want[i]) << "record " << i;
    if (i % 3 == 0) {
      const MemoryEvent* f = b.peek();
      ASSERT_NE(f, nullptr);
      EXPECT_EQ(*f, want[i / 3]);
      b.next();
    }
  }
  EXPECT_EQ(i, want.size());
  EXPECT_EQ(a.peek(), nullptr);
  EXPECT_EQ(r->read_memory_events(), want);
  // The block copied as it is makes the same trace's records.
  const std::string copy = dir.file("copy.hlt");
  {
    TraceWriter w(copy, WriterOptions{});
    std::vector<Event> ev = generate(7, 40);
    for (Event& e : ev) w.append(e);
    w.copy_memory_block(r->memory_block());
    w.close();
  }
  EXPECT_EQ(TraceReader::open(copy)->read_memory_events(), want);
  EXPECT_EQ(TraceReader::open(copy)->memory_block(), r->memory_block());
}

// Records handed to the writer one at a time as it writes the block
// (set_memory_source, the normaliser's way) make the same file, byte for
// byte, as the same records given at once; a source that runs dry before
// its count is an error.
TEST(MemoryBlock, WrittenAsTheRecordsComeIsTheSameFile) {
  TempDir dir;
  std::vector<MemoryEvent> want;
  want.push_back({MemOp::map, 0, 0, 0, 1, 0, 1 << 20, 0, 0, 0});
  for (uint64_t i = 1; i < 5000; ++i) want.push_back({MemOp::touch, 0, i, 0, 1, 0, 4096, i % 9, 0, 0});
  const auto write = [&](const std::string& name, int how) {
    const std::string path = dir.file(name);
    WriterOptions o;
    o.timestamps = true;
    TraceWriter w(path, o);
    std::vector<Event> ev = generate(7, 40);
    for (Event& e : ev) w.append(e);
    size_t next = 0;
    if (how == 0) w.set_memory_events(want);
    if (how != 0)
      w.set_memory_source(want.size() + (how == 2), [&](MemoryEvent& e) {
        if (next == want.size()) return false;
        e = want[next++];
        return true;
      });
    w.close();
    return read_file(path);
  };
  const std::string whole = write("whole.hlt", 0), streamed = write("streamed.hlt", 1);
  EXPECT_EQ(streamed, whole);
  EXPECT_EQ(TraceReader::from_memory(streamed, "s")->read_memory_events(), want);
  try {
    write("short.hlt", 2);
    ADD_FAILURE() << "a source short of its count was written";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("short.hlt: the memory records ended before their count"), std::string::npos)
        << e.what();
  }
}

// A writer that dies while it writes such a block (killed: here, its
// source ends the process) leaves a trace cut short whose events all read;
// one whose source throws leaves the file as if the block never began.
TEST(MemoryBlock, AWriterThatDiesInTheBlockLeavesItsEvents) {
  TempDir dir;
  const std::vector<Event> ev = generate(7, 3000);
  for (const bool killed : {true, false}) {
    const std::string path = dir.file(killed ? "killed.hlt" : "threw.hlt");
    const auto write = [&] {
      TraceWriter w(path, WriterOptions{});
      for (Event e : ev) w.append(e);
      uint64_t n = 0;
      w.set_memory_source(100000, [&](MemoryEvent& e) {
        if (n == 50000) {
          if (killed) _exit(0);
          throw std::runtime_error("the source failed");
        }
        e = MemoryEvent{MemOp::latency, 0, n++, 0, 0, 0, 40, 0, 0, 0};
        return true;
      });
      w.close();
    };
    if (killed) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        write();
        _exit(1);
      }
      int st = 0;
      ASSERT_EQ(waitpid(pid, &st, 0), pid);
      ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    } else {
      EXPECT_THROW(write(), std::runtime_error);
    }
    auto r = TraceReader::open(path);
    EXPECT_FALSE(r->complete());
    EXPECT_EQ(r->event_count(), ev.size()) << r->warning();
    EXPECT_EQ(r->memory_event_count(), 0u);
    MergedCursor cur(*r);
    std::vector<Event> out(4096);
    size_t n = 0;
    while (size_t k = cur.next(out.data(), out.size())) n += k;
    EXPECT_EQ(n, ev.size());
  }
}

// The stream's edges: no records, exactly a batch (or two) of records, a
// frame with bytes after it or cut short, whether read whole or a record
// at a time.
TEST(MemoryBlock, StreamEdges) {
  const auto records = [](size_t n) {
    std::vector<MemoryEvent> m;
    m.push_back({MemOp::map, 0, 0, 0, 1, 0, 1 << 20, 0, 0, 0});
    for (size_t i = 1; i < n; ++i) m.push_back({MemOp::touch, 0, i, 0, 1, 0, 4096, 1, 0, 0});
    return m;
  };
  std::string error;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{2048}}) {
    const std::vector<MemoryEvent> want = n == 0 ? std::vector<MemoryEvent>{} : records(n);
    const std::string p = encode_memory_events(want);
    EXPECT_EQ(decode_memory_events(p, error), want) << n;
    MemoryRecordStream in(p);
    EXPECT_EQ(in.declared(), n);
    MemoryEvent e;
    size_t got = 0;
    while (in.next(&e, 1) == 1) ASSERT_EQ(e, want[got++]) << n;
    EXPECT_EQ(got, n);
    EXPECT_EQ(in.error(), "");
    EXPECT_EQ(in.consumed(), p.size());
    // Anything after the frame, or a frame cut short, is found at the end.
    for (const std::string& bad : {p + "x", p.substr(0, p.size() - 1)}) {
      MemoryRecordStream b(bad);
      std::vector<MemoryEvent> all(n + 1);
      while (b.next(all.data(), all.size()) != 0) {
      }
      EXPECT_EQ(b.error(), "memory block does not decompress to its size (corrupt data)") << n;
    }
  }
}

// What is held per region (everyone who reads the records follows each
// one) is held against the memory available as it doubles.
TEST(MemoryBlock, RegionsPastTheMemoryAvailableAreRefused) {
  std::vector<MemoryEvent> m;
  for (uint64_t r = 1; r <= (uint64_t{1} << 20); ++r) m.push_back({MemOp::map, 0, 0, 0, r, 0, 4096, 0, 0, 0});
  EXPECT_EQ(check_memory_events(m), "");
  setenv("HEAPLAB_MEMORY_AVAILABLE", std::to_string(uint64_t{64} << 20).c_str(), 1);
  const std::string bad = check_memory_events(m);
  unsetenv("HEAPLAB_MEMORY_AVAILABLE");
  EXPECT_EQ(bad,
            "memory record 1048575 (mmap): 1048575 regions mapped at once so far; twice that needs about 200 MiB to "
            "follow, more than the 64 MiB this machine has available");
  // Unmapped as they go, they are followed one at a time, however many.
  std::vector<MemoryEvent> loop;
  for (uint64_t r = 1; r <= (uint64_t{1} << 20) + 5; ++r) {
    loop.push_back({MemOp::map, 0, r, 0, r, 0, 8192, 0, 0, 0});
    loop.push_back({MemOp::unmap, 0, r, 0, r, 4096, 4096, 0, 0, 0});
    loop.push_back({MemOp::unmap, 0, r, 0, r, 0, 4096, 0, 0, 0});
  }
  setenv("HEAPLAB_MEMORY_AVAILABLE", std::to_string(uint64_t{64} << 20).c_str(), 1);
  EXPECT_EQ(check_memory_events(loop), "");
  unsetenv("HEAPLAB_MEMORY_AVAILABLE");
  loop.push_back({MemOp::touch, 0, 1 << 21, 0, 7, 0, 4096, 1, 0, 0});
  EXPECT_EQ(check_memory_events(loop), "memory record 3145743 (touch): region 7 is no longer mapped");
}

TEST(MemoryBlock, MalformedPayloadsAreRefused) {
  std::string error;
  EXPECT_FALSE(decode_memory_events("short", error));
  EXPECT_EQ(error, "memory block too short");
  std::string p = encode_memory_events(some_memory_events());
  std::string bad = p;
  bad[8] = 9;  // count no longer matches raw_size
  EXPECT_FALSE(decode_memory_events(bad, error));
  EXPECT_EQ(error, "memory block sizes do not match its record count");
  bad = p.substr(0, p.size() - 3);  // zstd frame cut short
  EXPECT_FALSE(decode_memory_events(bad, error));
  EXPECT_EQ(error, "memory block does not decompress to its size (corrupt data)");
  bad = p;
  bad[0] = 2;  // a later layout: left out, not an error
  EXPECT_EQ(decode_memory_events(bad, error), std::vector<MemoryEvent>{});
  // A hostile count whose frame cannot hold it is refused before anything is allocated.
  bad = p;
  const uint64_t huge = uint64_t{1} << 31;
  std::memcpy(bad.data() + 8, &huge, 8);
  const uint64_t raw = huge * kMemoryRecordSize;
  std::memcpy(bad.data() + 16, &raw, 8);
  EXPECT_FALSE(decode_memory_events(bad, error));
  EXPECT_EQ(error, "memory block does not decompress to its size (corrupt data)");
  // What a replay relies on.
  std::vector<MemoryEvent> m = some_memory_events();
  EXPECT_EQ(check_memory_events(m), "");
  m[1].offset = 1 << 20;  // touch past the region's end
  EXPECT_EQ(check_memory_events(m),
            "memory record 1 (touch): offset 1048576 + 1048576 bytes lies outside region 1 (1048576 bytes)");
  m = some_memory_events();
  m[0].region = 5;
  EXPECT_EQ(check_memory_events(m), "memory record 0 (mmap): region 5 is not the next one");
  m = some_memory_events();
  m[3].region = 9;
  EXPECT_EQ(check_memory_events(m), "memory record 3 (madvise_dontneed): region 9 was never mapped");
  m = some_memory_events();
  m[5].after = 1;
  EXPECT_EQ(check_memory_events(m), "memory record 5 (munmap): out of order (after 1)");
  // Timed calls are in trace order too; the objects' counts come last, by
  // ascending object id (a replay reads each once, as its object is made).
  m = some_memory_events();
  m[6].after = 9;
  EXPECT_EQ(check_memory_events(m), "");
  m[6].after = 6;  // (the munmap before it is at 7)
  EXPECT_EQ(check_memory_events(m), "memory record 6 (latency): out of order (after 6)");
  m = some_memory_events();
  m.push_back({MemOp::object, 0, 0, 0, 2, 0, 65536, 3, 0, 0});
  EXPECT_EQ(check_memory_events(m), "memory record 8 (object_resident): object 2 out of order (after object 2)");
  m.back().region = 3;
  EXPECT_EQ(check_memory_events(m), "");
  m.push_back({MemOp::latency, 0, 9, 0, 0, 0, 41, 0, 0, 0});
  EXPECT_EQ(check_memory_events(m), "memory record 9 (latency): after the objects' resident counts");
}

// Format 1.2: a replay's addresses (ADDR blocks) come back exactly, by
// seq, across blocks; a stretch without any costs no block; the file says
// 1.2; damage is caught; events and memory are untouched.
TEST(AddressBlock, RoundTripAcrossBlocks) {
  TempDir dir;
  const std::string path = dir.file("addr.hlt");
  testutil::GenOptions g;
  g.all_ops = false;
  g.timestamps = false;
  std::vector<Event> ev = generate(11, (size_t{1} << 20) * 2 + 1000, g);
  std::vector<uint64_t> addr(ev.size(), 0);
  for (size_t i = 0; i < ev.size(); ++i)
    if (i % 7 != 0 && (i < (size_t{1} << 20) || i >= (size_t{2} << 20)))
      addr[i] = 0x7f0000000000 + (i * 48) % 100000 * 16;
  {
    TraceWriter w(path, WriterOptions{});
    for (Event& e : ev) w.append(e);
    w.set_memory_events(some_memory_events());
    w.set_addresses(addr);
    w.close();
  }
  auto r = TraceReader::open(path);
  EXPECT_EQ(r->minor_version(), 2);
  EXPECT_EQ(r->read_memory_events(), some_memory_events());
  ASSERT_EQ(r->address_blocks().size(), 2u);  // the second 2^20 events have none: no block
  EXPECT_EQ(r->address_blocks()[0].first_seq, 0u);
  EXPECT_EQ(r->address_blocks()[1].first_seq, uint64_t{2} << 20);
  EXPECT_EQ(r->address_blocks()[1].count, 1000u);
  AddressCursor cur(*r);
  size_t wrong = 0;
  for (size_t i = 0; i < ev.size(); ++i) wrong += cur.at(i) != addr[i];
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(cur.at(ev.size()), 0u);  // past the last event
  EXPECT_EQ(cur.at(5), addr[5]);     // going back decodes the block again
  // The events are those written, as without addresses.
  EXPECT_EQ(read_all(*r).size(), ev.size());
  // A truncated file finds the blocks by scanning.
  const std::string img = read_file(path);
  auto cut = TraceReader::from_memory(std::string_view(img).substr(0, img.size() - 40), "cut");
  EXPECT_EQ(cut->address_blocks().size(), 2u);
  // Without addresses a file stays 1.1 (with MEMX) or 1.0.
  EXPECT_EQ(TraceReader::from_memory(small_trace(dir), "m")->minor_version(), 0);
  EXPECT_FALSE(TraceReader::from_memory(small_trace(dir), "m")->has_addresses());
}

TEST(AddressBlock, EveryFlippedByteIsDetected) {
  TempDir dir;
  const std::string path = dir.file("a.hlt");
  {
    TraceWriter w(path, WriterOptions{});
    std::vector<Event> ev = generate(3, 40);
    for (Event& e : ev) w.append(e);
    std::vector<uint64_t> addr(ev.size());
    for (size_t i = 0; i < addr.size(); ++i) addr[i] = 0x55d0c0a01000 + i * 32;
    w.set_addresses(addr);
    w.close();
  }
  const std::string img = read_file(path);
  ASSERT_TRUE(TraceReader::from_memory(img, "a")->has_addresses());
  for (size_t i = 0; i < img.size(); ++i) {
    std::string bad = img;
    bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
    const std::string err = open_error(bad);
    ASSERT_FALSE(err.empty()) << "flip at " << i << " went unnoticed";
    ASSERT_EQ(err.find('\n'), std::string::npos) << err;
  }
}

TEST(AddressBlock, MalformedPayloadsAreRefused) {
  std::string error;
  EXPECT_FALSE(decode_address_block("abc", error));
  EXPECT_EQ(error, "address block too short");
  EXPECT_FALSE(decode_address_block(std::string("\1\0\0\0short", 9), error));
  EXPECT_EQ(error, "address block too short");
  EXPECT_TRUE(decode_address_block(std::string("\2\0\0\0", 4), error));  // a later, shorter layout: skipped
  const std::vector<uint64_t> a = {0x1000, 0, 0x2000, 0x1ff0};
  const std::string p = encode_address_block(9, a.data(), 4);
  auto b = decode_address_block(p, error);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->first_seq, 9u);
  EXPECT_EQ(b->addresses, a);
  std::string bad = p;
  bad[4] = 5;  // count no longer matches raw_size
  EXPECT_FALSE(decode_address_block(bad, error));
  EXPECT_EQ(error, "address block sizes do not match its count");
  bad = p.substr(0, p.size() - 3);  // zstd frame cut short
  EXPECT_FALSE(decode_address_block(bad, error));
  EXPECT_EQ(error, "address block does not decompress to its size (corrupt data)");
  bad = p;
  bad[0] = 2;  // a later layout: left out, not an error
  b = decode_address_block(bad, error);
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->addresses.empty());
  bad = p;
  const uint64_t near_end = ~uint64_t{0} - 2;
  std::memcpy(bad.data() + 8, &near_end, 8);
  EXPECT_FALSE(decode_address_block(bad, error));
  EXPECT_EQ(error, "address block seqs run past 2^64");
  const uint64_t at_end = ~uint64_t{0} - 3;  // seqs 2^64 - 4 .. 2^64 - 1: the last ones there are
  std::memcpy(bad.data() + 8, &at_end, 8);
  EXPECT_TRUE(decode_address_block(bad, error)) << error;
}

// Blocks whose checksums were made to match: a block naming events past a
// complete trace's last is refused on open; a frame that does not decode is
// refused when read (heaplab check reads them all).
TEST(AddressBlock, DamageBehindValidChecksumsIsCaught) {
  TempDir dir;
  const std::string path = dir.file("a.hlt");
  {
    TraceWriter w(path, WriterOptions{});
    std::vector<Event> ev = generate(5, 40);
    for (Event& e : ev) w.append(e);
    w.set_addresses(std::vector<uint64_t>(ev.size(), 0x7f0000001000));
    w.close();
  }
  const std::string img = read_file(path);
  const size_t at = img.find("ADDR");
  ASSERT_NE(at, std::string::npos);
  std::string past = img;
  const uint64_t first = 30;  // all the events' addresses from seq 30: past the last
  std::memcpy(past.data() + at + 16 + 8, &first, 8);
  testutil::repair_checksums(past);
  const uint64_t n = TraceReader::from_memory(img, "a")->event_count();
  EXPECT_EQ(open_error(past), "mem.hlt: offset " + std::to_string(at) + ": address block names events up to seq " +
                                  std::to_string(30 + n - 1) + ", past the trace's last (" + std::to_string(n) +
                                  " events)");
  std::string frame = img;
  frame[at + 16 + 24 + 6] = static_cast<char>(frame[at + 16 + 24 + 6] ^ 0x55);  // inside the zstd frame
  testutil::repair_checksums(frame);
  auto r = TraceReader::from_memory(frame, "f.hlt");
  AddressCursor cur(*r);
  try {
    cur.at(0);
    FAIL() << "a damaged frame was read";
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()),
              "f.hlt: offset " + std::to_string(at) + ": address block does not decompress to its size (corrupt data)");
  }
}

// Each thread with events costs the writer about 640 bytes: from 65,536
// threads on, each doubling is held against the memory available (an
// importer fed a new thread id an event stops in one line, not at 10 GB).
TEST(BadInput, WriterThreadsBeyondTheMemoryAreRefused) {
  TempDir dir;
  const std::string path = dir.file("many.hlt");
  setenv("HEAPLAB_MEMORY_AVAILABLE", std::to_string(uint64_t{64} << 20).c_str(), 1);
  std::string error;
  uint32_t written = 0;
  try {
    TraceWriter w(path, WriterOptions{});
    for (uint32_t t = 0; t < 70000; ++t, ++written) {
      Event e;
      e.op = Op::thread_start;
      e.thread = t;
      w.append(e);
    }
  } catch (const TraceError& e) {
    error = e.what();
  }
  unsetenv("HEAPLAB_MEMORY_AVAILABLE");
  EXPECT_EQ(written, 65536u);
  EXPECT_EQ(error, path +
                       ": 65536 threads so far; twice that needs about 80 MiB to write (640 bytes a thread), more than "
                       "the 64 MiB this machine has available");
}

// Reading in global order holds a decoded chunk per thread: a trace whose
// chunks declare more than the memory available is refused at once, in
// one line (a few KiB of file can declare 64 MiB chunks for many threads).
TEST(BadInput, MergedReadBeyondTheMemoryIsRefusedAtOnce) {
  TempDir dir;
  const std::string path = dir.file("threads.hlt");
  testutil::GenOptions g;
  g.threads = 20;
  std::vector<Event> ev = generate(3, 4000, g);
  write_trace(path, ev, WriterOptions{});
  auto r = TraceReader::open(path);
  const uint64_t need = r->decoded_bytes_at_once();
  uint64_t sum = 0;  // (each thread has one chunk here: its raw size)
  for (const ChunkRef& c : r->chunks()) {
    const std::string img = read_file(path);
    uint32_t raw = 0;
    std::memcpy(&raw, img.data() + c.offset + 16 + 60, 4);
    sum += raw;
  }
  EXPECT_EQ(need, sum);
  setenv("HEAPLAB_MEMORY_AVAILABLE", std::to_string(need).c_str(), 1);
  EXPECT_NO_THROW(MergedCursor{*r});
  setenv("HEAPLAB_MEMORY_AVAILABLE", std::to_string(need - 1).c_str(), 1);
  try {
    MergedCursor cur(*r);
    FAIL() << "no error";
  } catch (const TraceError& e) {
    char want[64];
    std::snprintf(want, sizeof want, "%.1f MiB", double(need) / double(1 << 20));
    EXPECT_EQ(std::string(e.what()), path + ": reading its 20 threads in order needs " + want +
                                         " at once (a decoded chunk a thread, as the chunk headers declare), more "
                                         "than the " +
                                         want + " this machine has available");
  }
  unsetenv("HEAPLAB_MEMORY_AVAILABLE");
}

TEST(BadInput, MissingFile) {
  try {
    TraceReader::open("/nonexistent/trace.hlt");
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/trace.hlt: cannot open: No such file or directory");
  }
}

// Another program cutting a trace short while it is read (a capture writing
// one of the same name): one line naming the file and exit status 2, where
// the pages past the new end killed the reader with SIGBUS ("Bus error").
TEST(ReaderDeathTest, AFileCutShortWhileReadIsOneLine) {
  TempDir dir;
  const std::string path = dir.file("cut.hlt");
  testutil::GenOptions g;
  g.all_ops = false;
  WriterOptions wo;
  wo.chunk_events = 4096;
  std::vector<Event> events = generate(7, 200000, g);
  write_trace(path, events, wo);
  EXPECT_EXIT(
      {
        auto r = TraceReader::open(path);
        if (truncate(path.c_str(), 0) != 0) _exit(3);
        MergedCursor c(*r);
        std::vector<Event> buf(256);
        uint64_t n = 0;
        while (const size_t k = c.next(buf.data(), buf.size())) n += k;
        _exit(n == 0 ? 4 : 5);  // (not reached: the first chunk's pages are gone)
      },
      ::testing::ExitedWithCode(2),
      "^heaplab: error: [^\n]*cut.hlt: the file shrank while it was read \\(rewritten or "
      "truncated by another program\\?\\)\n$");
}

// Killed by SIGBUS (under a sanitizer, whose handler was there first: its
// report's ending, an exit status or SIGABRT with abort_on_error; never the
// exit 0 of a signal swallowed, nor the guard's exit 2).
bool killed_by_sigbus(int status) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return !WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 2);
#else
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
#endif
}

// A SIGBUS another process sends is not a file cut short: it goes to the
// disposition before (here the default, or a sanitizer's), not swallowed.
TEST(ReaderDeathTest, ASigbusSentIsNotTakenForAFileCutShort) {
  TempDir dir;
  const std::string path = dir.file("sent.hlt");
  std::vector<Event> events = generate(7, 1000);
  write_trace(path, events, WriterOptions{});
  EXPECT_EXIT(
      {
        auto r = TraceReader::open(path);
        kill(getpid(), SIGBUS);
        _exit(0);  // (the signal swallowed)
      },
      killed_by_sigbus, "");
}

}  // namespace
}  // namespace heaplab::trace
