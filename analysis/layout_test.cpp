// Tests of the layout analysis (heaplab layout) on hand-placed blocks whose
// every neighbour, gap and page is known by construction. The same analysis
// on real allocators' addresses is checked in replay/replay_layout_test.cpp.
#include "analysis/layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/event_text.h"

namespace heaplab::analysis {
namespace {

using trace::Event;
using trace::Op;

struct Call {
  Event e;
  uint64_t address;
};

Call made(uint64_t seq, uint64_t id, uint64_t size, uint64_t address, uint32_t thread = 0, Op op = Op::malloc,
          uint64_t old = 0) {
  Event e;
  e.seq = seq;
  e.op = op;
  e.id = id;
  e.old = old;
  e.size = size;
  e.thread = thread;
  return {e, address};
}

Call freed(uint64_t seq, uint64_t old, uint64_t address, uint32_t thread = 0) {
  Event e;
  e.seq = seq;
  e.op = Op::free;
  e.old = old;
  e.thread = thread;
  return {e, address};
}

// Two threads' blocks on one page, one spanning three pages, a free, a
// realloc that moves, and an allocator that hands out a live block again.
std::vector<Call> placed_by_hand() {
  return {
      made(0, 1, 16, 0x10000),                      // page 0x10000, alone
      made(1, 2, 16, 0x10020),                      // 16 bytes above #1, same page
      made(2, 3, 8192, 0x10ff0, 1),                 // thread 1: pages 0x10000..0x12000, the first shared
      made(3, 4, 16, 0x10030, 1),                   // thread 1, on #2's cache line
      freed(4, 3, 0x10ff0),                         // gives back 0x11000 and 0x12000
      made(5, 5, 100, 0x20000, 0, Op::realloc, 1),  // #1 goes (its page stays: #2, #4), a new page
      made(6, 6, 8, 0x10028),                       // on #2: reused early, or an overlap
  };
}

TEST(Layout, NotesSayNeighboursGapsAndPages) {
  const std::vector<Call> calls = placed_by_hand();
  LayoutAnalyzer a(calls.size());
  std::string text, line;
  for (const Call& c : calls) {
    const LayoutNote n = a.observe(c.e, c.address);
    event_text(c.e, false, line, c.address);
    LayoutAnalyzer::append(line, n);
    text += line;
  }
  a.finish();
  EXPECT_EQ(text,
            "0 t0 malloc(16) = #1 @0x10000                     # prev none, next none, pages [0x10000, 0x10000], 1 "
            "more pages\n"
            "1 t0 malloc(16) = #2 @0x10020                     # prev 0x10000, gap 16, next none, pages [0x10000, "
            "0x10000], 0 more pages\n"
            "2 t1 malloc(8192) = #3 @0x10ff0                   # prev 0x10020, gap 4032, next none, pages [0x10000, "
            "0x12000], 2 more pages\n"
            "3 t1 malloc(16) = #4 @0x10030                     # prev 0x10020, gap 0, next 0x10ff0, gap 4016, pages "
            "[0x10000, 0x10000], 0 more pages\n"
            "4 t0 free(#3 @0x10ff0)                            # pages [0x10000, 0x12000], 2 fewer pages\n"
            "5 t0 realloc(#1, 100) = #5 @0x20000               # prev 0x10030, gap 65472, next none, pages [0x20000, "
            "0x20000], 1 more pages\n"
            "6 t0 malloc(8) = #6 @0x10028                      # prev none, next 0x10030, gap 0, pages [0x10000, "
            "0x10000], 0 more pages, reuses 1 block early\n");
  const LayoutSummary& s = a.summary();
  EXPECT_EQ(s.events, 7u);
  EXPECT_EQ(s.placed, 6u);
  EXPECT_EQ(s.released, 2u);      // #3, and #1 by the realloc
  EXPECT_EQ(s.reused_early, 1u);  // #2, under #6
  EXPECT_EQ(s.overlaps, 1u);      // (the calls came in the replay's order: the allocator's fault)
  EXPECT_EQ(s.pages_peak, 3u);
  EXPECT_EQ(s.pages_peak_seq, 2u);
  EXPECT_EQ(s.live_bytes_at_pages_peak, 16u + 16 + 8192);
  EXPECT_EQ(s.pages, 2u);  // 0x10000 (#4, #6) and 0x20000 (#5)
  EXPECT_EQ(s.live_bytes, 16u + 100 + 8);
  // #3 and #4 share a page with thread 0's #2, and #4 its cache line; #6
  // (thread 0) shares the page and the line with thread 1's #4.
  EXPECT_EQ(s.shared_page_other_thread, 3u);
  EXPECT_EQ(s.shared_line_other_thread, 2u);
  // Size classes: 16 bytes (bucket 5): #1 #2 #4; 8 (4): #6; 8192 (14): #3; 100 (7): #5.
  EXPECT_EQ(s.by_size[5].objects, 3u);
  EXPECT_EQ(s.by_size[4].objects, 1u);
  EXPECT_EQ(s.by_size[14].objects, 1u);
  EXPECT_EQ(s.by_size[7].objects, 1u);
  EXPECT_EQ(s.by_size[14].pages.buckets[Log2Histogram::bucket_of(3)], 1u);
  // Gaps to the block above: #4 4016 and #6 0 (the others had none above).
  EXPECT_EQ(s.by_size[5].gap_above.samples, 1u);
  EXPECT_EQ(s.by_size[5].gap_above.buckets[Log2Histogram::bucket_of(4016)], 1u);
  EXPECT_EQ(s.by_size[4].gap_above.buckets[0], 1u);
  // Replayed by several threads, the same calls are no allocator's fault.
  LayoutAnalyzer threaded(calls.size(), false);
  for (const Call& c : calls) threaded.observe(c.e, c.address);
  EXPECT_EQ(threaded.summary().reused_early, 1u);
  EXPECT_EQ(threaded.summary().overlaps, 0u);
  ASSERT_FALSE(s.curve.empty());
  EXPECT_EQ(s.curve.back().seq, 6u);
  EXPECT_EQ(s.curve.back().pages, 2u);
}

// A realloc that failed in the trace but not in the replay moved the
// object: its old block goes, the new one (of the size asked) is placed,
// and the object's free releases the new one.
TEST(Layout, FailedReallocThatMovedInTheReplayMovesTheObject) {
  LayoutAnalyzer a(3);
  Call m = made(0, 1, 16, 0x1000);
  a.observe(m.e, m.address);
  Call r = made(1, 0, 100000, 0x50000, 0, Op::realloc, 1);
  r.e.flags = trace::kFailed | trace::kNullResult;
  const LayoutNote moved = a.observe(r.e, r.address);
  EXPECT_EQ(moved.kind, LayoutNote::Kind::placed);
  EXPECT_EQ(moved.pages_delta, 25 - 1);  // 0x50000..0x686a0: 25 pages; 0x1000 given back
  Call f = freed(2, 1, 0x50000);
  const LayoutNote gone = a.observe(f.e, f.address);
  EXPECT_EQ(gone.kind, LayoutNote::Kind::released);
  EXPECT_EQ(gone.address, 0x50000u);
  EXPECT_EQ(gone.pages_delta, -25);
  EXPECT_EQ(a.summary().pages, 0u);
  EXPECT_EQ(a.summary().reused_early, 0u);
  // Failed in the replay too: the object stays where it is.
  LayoutAnalyzer b(2);
  b.observe(m.e, m.address);
  Call stay = made(1, 0, 100000, 0x1000, 0, Op::realloc, 1);
  stay.e.flags = trace::kFailed | trace::kNullResult;
  EXPECT_EQ(b.observe(stay.e, stay.address).kind, LayoutNote::Kind::none);
  EXPECT_EQ(b.summary().pages, 1u);
}

TEST(Layout, AnAddressWhoseBlockRunsPast2To64IsNone) {
  LayoutAnalyzer a(1);
  Call c = made(0, 1, 64, ~uint64_t{0} - 31);
  EXPECT_EQ(a.observe(c.e, c.address).kind, LayoutNote::Kind::none);
  EXPECT_EQ(a.summary().unaddressed, 1u);
}

TEST(Layout, BlocksWithoutAnAddressAreCountedNotPlaced) {
  LayoutAnalyzer a(3);
  Call c = made(0, 1, 64, 0);
  EXPECT_EQ(a.observe(c.e, 0).kind, LayoutNote::Kind::none);
  Call f = freed(1, 1, 0);
  EXPECT_EQ(a.observe(f.e, 0).kind, LayoutNote::Kind::none);
  Event start;
  start.seq = 2;
  start.op = Op::thread_start;
  EXPECT_EQ(a.observe(start, 0).kind, LayoutNote::Kind::none);
  EXPECT_EQ(a.summary().unaddressed, 1u);
  EXPECT_EQ(a.summary().placed, 0u);
  EXPECT_EQ(a.summary().pages, 0u);
}

TEST(Layout, AZeroByteBlockTakesOneByte) {
  LayoutAnalyzer a(2);
  Call z = made(0, 1, 0, 0x5000);
  const LayoutNote n = a.observe(z.e, z.address);
  EXPECT_EQ(n.pages_delta, 1);
  Call next = made(1, 2, 8, 0x5001);
  const LayoutNote m = a.observe(next.e, next.address);
  EXPECT_EQ(m.reused_early, 0u);
  EXPECT_EQ(m.prev_gap, 0u);
}

TEST(Layout, JsonAndTablesNameEveryFigure) {
  const std::vector<Call> calls = placed_by_hand();
  LayoutAnalyzer a(calls.size());
  for (const Call& c : calls) a.observe(c.e, c.address);
  a.finish();
  const nlohmann::json j = layout_json(a.summary());
  EXPECT_EQ(j["working_set_pages_peak"], 3);
  EXPECT_EQ(j["overlapping_blocks"], 1);
  EXPECT_EQ(j["blocks_sharing_a_cache_line_with_another_thread"], 2);
  ASSERT_EQ(j["by_size"].size(), 4u);
  EXPECT_EQ(j["by_size"][1]["size"], "16..31");
  EXPECT_EQ(j["by_size"][1]["objects"], 3);
  EXPECT_EQ(j["by_size"][1]["gap_above"], (nlohmann::json{{"2,048..4,095", 1}}));
  EXPECT_EQ(j["working_set"]["points"].back(), (nlohmann::json{6, 2, 124}));
  const std::string t = layout_table({{"by hand", &a.summary()}});
  EXPECT_NE(t.find("working set peak, pages                         3"), std::string::npos) << t;
  EXPECT_NE(t.find("overlapping blocks                              1"), std::string::npos) << t;
  const std::string sz = layout_size_table(a.summary());
  EXPECT_NE(sz.find("8,192..16,383        1              -              -       2..3       2..3"), std::string::npos)
      << sz;
}

}  // namespace
}  // namespace heaplab::analysis
