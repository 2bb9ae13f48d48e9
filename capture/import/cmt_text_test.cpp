// Tests of the Compact Memory Traces text importer: every event is read back
// from the written trace.
#include "capture/import/cmt_text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/look_ahead.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_writer.h"
#include "capture/format/trace_testutil.h"
#include "capture/import/compress_testutil.h"
#include "capture/import/input_stream.h"
#include "capture/import/string_input_testutil.h"

namespace heaplab::import {
namespace {

namespace fs = std::filesystem;
using trace::Event;
using trace::Op;
using trace::testutil::source_dir;
using trace::testutil::TempDir;
using trace::testutil::write_file;

// ---------------------------------------------------------------------------
// Helpers

std::string cmt_fixture(const std::string& name) { return source_dir() + "/capture/testdata/cmt/" + name; }

using testutil::StringInput;

std::vector<Event> read_events(const std::string& trace_path) {
  auto r = trace::TraceReader::open(trace_path);
  EXPECT_TRUE(r->complete());
  std::vector<Event> events;
  trace::MergedCursor cur(*r);
  Event buf[1024];
  while (size_t n = cur.next(buf, std::size(buf))) events.insert(events.end(), buf, buf + n);
  EXPECT_EQ(events.size(), r->event_count());
  return events;
}

struct Imported {
  CmtImportReport rep;
  std::vector<Event> events;
};

// Imports `in` into a fresh trace, closes it and decodes every event.
Imported import_stream(InputStream& in) {
  TempDir dir;
  const std::string path = dir.file("out.hlt");
  Imported out;
  {
    trace::TraceWriter w(path, trace::WriterOptions{});
    out.rep = import_cmt_text(in, w);
    EXPECT_EQ(w.events(), out.rep.events);
    w.close();
  }
  out.events = read_events(path);
  EXPECT_EQ(out.events.size(), out.rep.events);
  for (size_t i = 0; i < out.events.size(); ++i) {
    EXPECT_EQ(out.events[i].seq, i);
    EXPECT_EQ(out.events[i].thread, 0u);
    EXPECT_EQ(out.events[i].time, 0u);
  }
  return out;
}

Imported import_text(const std::string& text) {
  StringInput in(text, "t.cmt");
  return import_stream(in);
}

Imported import_file(const std::string& path) {
  auto in = InputStream::open(path);
  return import_stream(*in);
}

// The InputError message of importing `text` (as "t.cmt").
std::string import_error(const std::string& text) {
  TempDir dir;
  StringInput in(text, "t.cmt");
  trace::TraceWriter w(dir.file("err.hlt"), trace::WriterOptions{});
  try {
    import_cmt_text(in, w);
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected InputError for: " << text;
  return {};
}

Event ev(Op op, uint64_t id, uint64_t old, uint64_t size, uint64_t count = 0, uint64_t align = 0, uint8_t flags = 0) {
  Event e{};
  e.op = op;
  e.id = id;
  e.old = old;
  e.size = size;
  e.count = count;
  e.align = align;
  e.flags = flags;
  return e;
}

// Compares the fields the importer decides (not seq/thread/time).
void expect_events(const std::vector<Event>& got, const std::vector<Event>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(trace::op_name(got[i].op), trace::op_name(want[i].op));
    EXPECT_EQ(got[i].id, want[i].id);
    EXPECT_EQ(got[i].old, want[i].old);
    EXPECT_EQ(got[i].size, want[i].size);
    EXPECT_EQ(got[i].count, want[i].count);
    EXPECT_EQ(got[i].align, want[i].align);
    EXPECT_EQ(int{got[i].flags}, int{want[i].flags});
  }
}

constexpr uint8_t kFailedNull = trace::kFailed | trace::kNullResult;

// ---------------------------------------------------------------------------
// The bundled CMT samples

// An independent, deliberately simple reading of CMT lines from the samples.
struct TextCall {
  std::string op;
  uint64_t size = 0, addr = 0, result = 0;
};

std::vector<TextCall> parse_sample(const std::string& path) {
  auto in = InputStream::open(path);
  LineReader lr(*in);
  std::vector<TextCall> calls;
  std::string_view line;
  while (lr.next(line)) {
    const std::string s(line);
    TextCall c;
    if (std::sscanf(s.c_str(), "malloc(%" SCNu64 ") = 0x%" SCNx64, &c.size, &c.result) == 2) {
      c.op = "malloc";
    } else if (std::sscanf(s.c_str(), "realloc(0x%" SCNx64 ", %" SCNu64 ") = 0x%" SCNx64, &c.addr, &c.size,
                           &c.result) == 3) {
      c.op = "realloc";
    } else if (std::sscanf(s.c_str(), "free(0x%" SCNx64 ")", &c.addr) == 1) {
      c.op = "free";
    } else {
      ADD_FAILURE() << "unexpected sample line " << lr.line_number() << ": " << s;
    }
    calls.push_back(c);
  }
  return calls;
}

// Checks events against the independently parsed calls, line by line: op,
// size, and that every consumed object is the one last returned at that
// address.
void expect_matches_text(const std::vector<Event>& events, const std::vector<TextCall>& calls) {
  ASSERT_EQ(events.size(), calls.size());
  std::map<uint64_t, uint64_t> live;  // address -> id
  uint64_t next_id = 1;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Event& e = events[i];
    const TextCall& c = calls[i];
    ASSERT_EQ(trace::op_name(e.op), c.op) << "line " << i + 1;
    ASSERT_EQ(e.flags, 0) << "line " << i + 1;
    if (c.op != "free") {
      ASSERT_EQ(e.size, c.size) << "line " << i + 1;
      ASSERT_EQ(e.id, next_id++) << "line " << i + 1;
    }
    if (c.op != "malloc") {
      auto it = live.find(c.addr);
      ASSERT_NE(it, live.end()) << "line " << i + 1 << " consumes an unknown address";
      ASSERT_EQ(e.old, it->second) << "line " << i + 1;
      live.erase(it);
    }
    if (c.op != "free") live[c.result] = e.id;
  }
}

TEST(CmtSamples, Hmmer456ImportsEveryCall) {
  const std::string path = cmt_fixture("456.hmmer.test.txt.bz2");
  const Imported got = import_file(path);
  EXPECT_EQ(got.rep.lines, 180216u);
  EXPECT_EQ(got.rep.events, 180216u);
  EXPECT_EQ(got.rep.skipped_lines, 0u);
  EXPECT_EQ(got.rep.unknown_frees, 0u);
  EXPECT_EQ(got.rep.first_unknown_free_line, 0u);
  EXPECT_EQ(got.rep.unknown_reallocs, 0u);
  EXPECT_EQ(got.rep.reused_live, 0u);
  EXPECT_EQ(got.rep.null_results, 0u);

  std::map<std::string_view, uint64_t> per_op;
  for (const Event& e : got.events) ++per_op[trace::op_name(e.op)];
  EXPECT_EQ(got.events.size(), 180216u);
  EXPECT_EQ(per_op["malloc"], 90076u);
  EXPECT_EQ(per_op["free"], 90075u);
  EXPECT_EQ(per_op["realloc"], 65u);
  EXPECT_EQ(per_op.size(), 3u);

  // First events: malloc(56) = 0x800e00000, malloc(17) = 0x800e00038, ...
  EXPECT_EQ(got.events[0].op, Op::malloc);
  EXPECT_EQ(got.events[0].size, 56u);
  EXPECT_EQ(got.events[0].id, 1u);
  EXPECT_EQ(got.events[1].size, 17u);
  EXPECT_EQ(got.events[1].id, 2u);

  expect_matches_text(got.events, parse_sample(path));
}

// More blocks live than the importer's table holds before it reads calls
// ahead of the one it takes (look_ahead.h's kLookAheadFrom): 70,000 blocks
// made, then reallocated or freed in a shuffled order, with frees of
// blocks never made (counted, the first one's line named): each event
// matches its line, every consumed object the one last made at its address.
TEST(CmtImport, MoreCallsThanTheLookAheadMatchTheirLines) {
  static_assert(kLookAheadFrom < 70000);
  std::string text;
  std::vector<TextCall> calls;
  std::vector<uint64_t> addrs;
  uint64_t line = 0, first_unknown = 0, unknown = 0;
  char buf[96];
  for (uint64_t i = 0; i < 70000; ++i) {
    addrs.push_back(0x10000 + 32 * i);
    std::snprintf(buf, sizeof buf, "malloc(%" PRIu64 ") = %#" PRIx64 "\n", i + 1, addrs.back());
    text += buf;
    ++line;
    calls.push_back({"malloc", i + 1, 0, addrs.back()});
  }
  std::mt19937_64 rng(5);
  std::shuffle(addrs.begin(), addrs.end(), rng);
  for (size_t k = 0; k < addrs.size(); ++k) {
    if (k % 7 == 0) {
      const uint64_t to = 0x900000 + 32 * k;
      std::snprintf(buf, sizeof buf, "realloc(%#" PRIx64 ", %zu) = %#" PRIx64 "\n", addrs[k], 100 + k, to);
      text += buf;
      ++line;
      calls.push_back({"realloc", 100 + k, addrs[k], to});
      addrs[k] = to;
    }
    if (k % 50 == 10) {
      std::snprintf(buf, sizeof buf, "free(%#" PRIx64 ")\n", 0xdead000 + 16 * k);  // never made
      text += buf;
      if (unknown++ == 0) first_unknown = line + 1;
      ++line;
    }
    std::snprintf(buf, sizeof buf, "free(%#" PRIx64 ")\n", addrs[k]);
    text += buf;
    ++line;
    calls.push_back({"free", 0, addrs[k], 0});
  }
  const Imported got = import_text(text);
  EXPECT_EQ(got.rep.lines, line);
  EXPECT_EQ(got.rep.unknown_frees, unknown);
  EXPECT_EQ(unknown, 1400u);
  EXPECT_EQ(got.rep.first_unknown_free_line, first_unknown);
  expect_matches_text(got.events, calls);
}

TEST(CmtSamples, Bzip2401KeepsSizesAbove2To28) {
  const std::string path = cmt_fixture("401.bzip2.txt");
  const Imported got = import_file(path);
  EXPECT_EQ(got.rep.lines, 53u);
  EXPECT_EQ(got.rep.events, 53u);
  EXPECT_EQ(got.rep.unknown_frees, 0u);
  ASSERT_EQ(got.events.size(), 53u);
  // malloc(4096) = 0x800e00000, then three malloc(294649856).
  EXPECT_EQ(got.events[0].size, 4096u);
  for (size_t i = 1; i <= 3; ++i) {
    EXPECT_EQ(got.events[i].op, Op::malloc);
    EXPECT_EQ(got.events[i].size, 294649856u);
    EXPECT_GT(got.events[i].size, uint64_t{1} << 28);
    EXPECT_EQ(got.events[i].requested_bytes(), 294649856u);
  }
  uint64_t biggest = 0, mallocs = 0, frees = 0;
  for (const Event& e : got.events) {
    biggest = std::max(biggest, e.size);
    mallocs += e.op == Op::malloc;
    frees += e.op == Op::free;
  }
  EXPECT_EQ(biggest, 294649856u);
  EXPECT_EQ(mallocs, 29u);
  EXPECT_EQ(frees, 24u);
  expect_matches_text(got.events, parse_sample(path));
}

TEST(CmtSamples, TruncatedCompressedSampleIsAnInputError) {
  TempDir dir;
  std::ifstream src(cmt_fixture("456.hmmer.test.txt.bz2"), std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
  ASSERT_GT(data.size(), 1000u);
  const std::string path = dir.file("cut.txt.bz2");
  write_file(path, std::string_view(data).substr(0, data.size() / 4));
  auto in = InputStream::open(path);
  trace::TraceWriter w(dir.file("cut.hlt"), trace::WriterOptions{});
  try {
    import_cmt_text(*in, w);
    FAIL() << "a truncated input must not import cleanly";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": bzip2 data ends unexpectedly (truncated file?)");
  }
  EXPECT_GT(w.events(), 0u);  // the lines before the cut were imported
}

// ---------------------------------------------------------------------------
// Sizes

TEST(CmtImport, SizesUseAll64Bits) {
  const Imported got = import_text(
      "malloc(9223372036854775807) = 0x10\n"
      "malloc(18446744073709551615) = 0x20\n"
      "malloc(0x7fffffffffffffff) = 0x30\n"
      "calloc(18446744073709551615, 4294967296) = 0x0\n"
      "memalign(9223372036854775808, 1) = 0x0\n"
      "realloc(0x10, 9223372036854775808) = 0x40\n");
  expect_events(
      got.events,
      {ev(Op::malloc, 1, 0, 9223372036854775807u), ev(Op::malloc, 2, 0, UINT64_MAX),
       ev(Op::malloc, 3, 0, 0x7fffffffffffffffu), ev(Op::calloc, 0, 0, 4294967296u, UINT64_MAX, 0, kFailedNull),
       ev(Op::memalign, 0, 0, 1, 0, 9223372036854775808u, kFailedNull), ev(Op::realloc, 4, 1, 9223372036854775808u)});
  EXPECT_EQ(got.events[3].requested_bytes(), UINT64_MAX);  // saturates
}

TEST(CmtErrors, NumbersOverflowing64BitsAreErrors) {
  EXPECT_EQ(import_error("malloc(1) = 0x10\nmalloc(18446744073709551616) = 0x20\n"),
            "t.cmt:2: bad argument 1 of malloc: \"malloc(18446744073709551616) = 0x20\"");
  EXPECT_EQ(import_error("malloc(0x10000000000000000) = 0x20\n"),
            "t.cmt:1: bad argument 1 of malloc: \"malloc(0x10000000000000000) = 0x20\"");
  EXPECT_EQ(import_error("calloc(18446744073709551616, 1) = 0x20\n"),
            "t.cmt:1: bad argument 1 of calloc: \"calloc(18446744073709551616, 1) = 0x20\"");
  EXPECT_EQ(import_error("calloc(1, 99999999999999999999) = 0x20\n"),
            "t.cmt:1: bad argument 2 of calloc: \"calloc(1, 99999999999999999999) = 0x20\"");
  EXPECT_EQ(import_error("free(0x10000000000000000)\n"),
            "t.cmt:1: bad argument 1 of free: \"free(0x10000000000000000)\"");
  EXPECT_EQ(import_error("malloc(1) = 0x10000000000000000\n"),
            "t.cmt:1: expected '= ADDRESS' after the call: \"malloc(1) = 0x10000000000000000\"");
  EXPECT_EQ(import_error("malloc(-1) = 0x10\n"), "t.cmt:1: bad argument 1 of malloc: \"malloc(-1) = 0x10\"");
}

// ---------------------------------------------------------------------------
// Object identity

TEST(CmtImport, AddressReusedAfterFreeIsANewObject) {
  const Imported got = import_text(
      "malloc(16) = 0x1000\n"
      "free(0x1000)\n"
      "malloc(32) = 0x1000\n"
      "malloc(8) = 0x2000\n"
      "free(0x1000)\n"
      "free(0x2000)\n"
      "malloc(64) = 0x1000\n"
      "free(0x1000)\n");
  expect_events(got.events,
                {ev(Op::malloc, 1, 0, 16), ev(Op::free, 0, 1, 0), ev(Op::malloc, 2, 0, 32), ev(Op::malloc, 3, 0, 8),
                 ev(Op::free, 0, 2, 0), ev(Op::free, 0, 3, 0), ev(Op::malloc, 4, 0, 64), ev(Op::free, 0, 4, 0)});
  EXPECT_EQ(got.rep.reused_live, 0u);
  EXPECT_EQ(got.rep.unknown_frees, 0u);
}

TEST(CmtImport, AllocationAtALiveAddressReplacesTheOldObject) {
  // A missed free: the old object leaks and later calls refer to the new one.
  const Imported got = import_text(
      "malloc(16) = 0x1000\n"
      "malloc(24) = 0x1000\n"
      "free(0x1000)\n"
      "free(0x1000)\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 16), ev(Op::malloc, 2, 0, 24), ev(Op::free, 0, 2, 0)});
  EXPECT_EQ(got.rep.reused_live, 1u);
  EXPECT_EQ(got.rep.unknown_frees, 1u);
  EXPECT_EQ(got.rep.first_unknown_free_line, 4u);
}

TEST(CmtImport, AddressSpellingsMatch) {
  // 0x prefix or none, either case: all the same address.
  const Imported got = import_text(
      "malloc(1) = 0xABCdef\n"
      "realloc(abcdef, 2) = 0X10\n"
      "free(0x0010)\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 1), ev(Op::realloc, 2, 1, 2), ev(Op::free, 0, 2, 0)});
}

// ---------------------------------------------------------------------------
// free

TEST(CmtImport, FreeOfAnUnknownAddressIsCountedNotWritten) {
  const Imported got = import_text(
      "malloc(16) = 0x1000\n"
      "# a comment\n"
      "free(0xdead)\n"
      "free(0x1000)\n"
      "free(0x1000)\n"
      "free(0xbeef)\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 16), ev(Op::free, 0, 1, 0)});
  EXPECT_EQ(got.rep.unknown_frees, 3u);
  EXPECT_EQ(got.rep.first_unknown_free_line, 3u);
  EXPECT_EQ(got.rep.lines, 6u);
  EXPECT_EQ(got.rep.events, 2u);
  EXPECT_EQ(got.rep.skipped_lines, 1u);
}

TEST(CmtImport, FreeOfNullIsWritten) {
  const Imported got = import_text("free(0x0)\nfree(0)\nfree(NULL)\nfree((nil))\n");
  expect_events(got.events,
                {ev(Op::free, 0, 0, 0), ev(Op::free, 0, 0, 0), ev(Op::free, 0, 0, 0), ev(Op::free, 0, 0, 0)});
  EXPECT_EQ(got.rep.unknown_frees, 0u);
}

// ---------------------------------------------------------------------------
// realloc

TEST(CmtImport, ReallocOfNullIsAnAllocation) {
  const Imported got = import_text(
      "realloc(0x0, 64) = 0x2000\n"
      "realloc(0, 8) = 0x3000\n"
      "realloc(NULL, 16) = 0x4000\n"
      "realloc((nil), 32) = 0x5000\n"
      "free(0x2000)\n"
      "free(0x5000)\n");
  expect_events(got.events, {ev(Op::realloc, 1, 0, 64), ev(Op::realloc, 2, 0, 8), ev(Op::realloc, 3, 0, 16),
                             ev(Op::realloc, 4, 0, 32), ev(Op::free, 0, 1, 0), ev(Op::free, 0, 4, 0)});
  EXPECT_EQ(got.rep.unknown_reallocs, 0u);
  EXPECT_EQ(got.rep.null_results, 0u);
}

TEST(CmtImport, ReallocInPlaceAndMoving) {
  const Imported got = import_text(
      "malloc(16) = 0x1000\n"
      "realloc(0x1000, 32) = 0x1000\n"
      "realloc(0x1000, 4096) = 0x8000\n"
      "malloc(16) = 0x1000\n"  // the old address is free again
      "free(0x8000)\n"
      "free(0x1000)\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 16), ev(Op::realloc, 2, 1, 32), ev(Op::realloc, 3, 2, 4096),
                             ev(Op::malloc, 4, 0, 16), ev(Op::free, 0, 3, 0), ev(Op::free, 0, 4, 0)});
  EXPECT_EQ(got.rep.reused_live, 0u);
  EXPECT_EQ(got.rep.unknown_frees, 0u);
}

TEST(CmtImport, ReallocToZeroReturningNullFreesTheObject) {
  const Imported got = import_text(
      "malloc(16) = 0x1000\n"
      "realloc(0x1000, 0) = 0x0\n"
      "free(0x1000)\n"        // already gone: unknown
      "malloc(8) = 0x1000\n"  // not a reuse of a live address
      "free(0x1000)\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 16), ev(Op::realloc, 0, 1, 0, 0, 0, trace::kNullResult),
                             ev(Op::malloc, 2, 0, 8), ev(Op::free, 0, 2, 0)});
  EXPECT_EQ(got.rep.null_results, 1u);
  EXPECT_EQ(got.rep.unknown_frees, 1u);
  EXPECT_EQ(got.rep.first_unknown_free_line, 3u);
  EXPECT_EQ(got.rep.reused_live, 0u);
}

TEST(CmtImport, FailedReallocKeepsTheOldObject) {
  const Imported got = import_text(
      "malloc(16) = 0x1000\n"
      "realloc(0x1000, 999999999999) = 0x0\n"
      "realloc(0x1000, 32) = (nil)\n"
      "free(0x1000)\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 16), ev(Op::realloc, 0, 1, 999999999999u, 0, 0, kFailedNull),
                             ev(Op::realloc, 0, 1, 32, 0, 0, kFailedNull), ev(Op::free, 0, 1, 0)});
  EXPECT_EQ(got.rep.null_results, 2u);
  EXPECT_EQ(got.rep.unknown_frees, 0u);
}

TEST(CmtImport, ReallocOfNullToZeroReturningNullIsAFailure) {
  // No object is consumed, so a NULL result is an allocation failure.
  const Imported got = import_text("realloc(0x0, 0) = 0x0\n");
  expect_events(got.events, {ev(Op::realloc, 0, 0, 0, 0, 0, kFailedNull)});
}

TEST(CmtImport, ReallocOfAnUnknownAddressIsWrittenAsReallocOfNull) {
  const Imported got = import_text(
      "realloc(0xbeef, 10) = 0x3000\n"
      "realloc(0xbeef, 0) = 0x0\n"
      "free(0x3000)\n");
  expect_events(got.events,
                {ev(Op::realloc, 1, 0, 10), ev(Op::realloc, 0, 0, 0, 0, 0, kFailedNull), ev(Op::free, 0, 1, 0)});
  EXPECT_EQ(got.rep.unknown_reallocs, 2u);
  EXPECT_EQ(got.rep.unknown_frees, 0u);
}

TEST(CmtImport, ReallocarrayToZeroBytesReturningNullFreesTheObject) {
  // reallocarray(p, n, s) is realloc(p, n * s): a zero count frees like a
  // zero size does.
  const Imported got = import_text(
      "malloc(16) = 0x1000\n"
      "reallocarray(0x1000, 4, 0) = 0x0\n"
      "malloc(16) = 0x2000\n"
      "reallocarray(0x2000, 0, 8) = 0x0\n"
      "malloc(16) = 0x3000\n"
      "reallocarray(0x3000, 2, 8) = 0x0\n"  // a real failure
      "free(0x1000)\n"
      "free(0x2000)\n"
      "free(0x3000)\n");
  expect_events(got.events,
                {ev(Op::malloc, 1, 0, 16), ev(Op::reallocarray, 0, 1, 0, 4, 0, trace::kNullResult),
                 ev(Op::malloc, 2, 0, 16), ev(Op::reallocarray, 0, 2, 8, 0, 0, trace::kNullResult),
                 ev(Op::malloc, 3, 0, 16), ev(Op::reallocarray, 0, 3, 8, 2, 0, kFailedNull), ev(Op::free, 0, 3, 0)});
  EXPECT_EQ(got.rep.unknown_frees, 2u);
  EXPECT_EQ(got.rep.first_unknown_free_line, 7u);
}

// ---------------------------------------------------------------------------
// NULL results

TEST(CmtImport, FailedAllocationsHaveNoObject) {
  const Imported got = import_text(
      "malloc(100) = 0x0\n"
      "malloc(101) = 0\n"
      "malloc(102) = (nil)\n"
      "malloc(103) = NULL\n"
      "malloc(104) = nil\n"
      "malloc(105) = 0x00000000\n"
      "calloc(2, 3) = 0x0\n"
      "memalign(64, 1) = (nil)\n"
      "posix_memalign(64, 2) = 0\n"
      "aligned_alloc(64, 3) = NULL\n"
      "valloc(4) = 0x0\n"
      "pvalloc(5) = 0x0\n"
      "malloc(1) = 0x10\n");
  expect_events(got.events,
                {ev(Op::malloc, 0, 0, 100, 0, 0, kFailedNull), ev(Op::malloc, 0, 0, 101, 0, 0, kFailedNull),
                 ev(Op::malloc, 0, 0, 102, 0, 0, kFailedNull), ev(Op::malloc, 0, 0, 103, 0, 0, kFailedNull),
                 ev(Op::malloc, 0, 0, 104, 0, 0, kFailedNull), ev(Op::malloc, 0, 0, 105, 0, 0, kFailedNull),
                 ev(Op::calloc, 0, 0, 3, 2, 0, kFailedNull), ev(Op::memalign, 0, 0, 1, 0, 64, kFailedNull),
                 ev(Op::posix_memalign, 0, 0, 2, 0, 64, kFailedNull),
                 ev(Op::aligned_alloc, 0, 0, 3, 0, 64, kFailedNull), ev(Op::valloc, 0, 0, 4, 0, 0, kFailedNull),
                 ev(Op::pvalloc, 0, 0, 5, 0, 0, kFailedNull), ev(Op::malloc, 1, 0, 1)});  // ids stay dense
  EXPECT_EQ(got.rep.null_results, 12u);
  EXPECT_EQ(got.rep.events, 13u);
}

// ---------------------------------------------------------------------------
// Syntax

TEST(CmtImport, EveryCallKindAndItsFields) {
  const Imported got = import_text(
      "malloc(56) = 0x800e00000\n"
      "calloc(4, 16) = 0x800e00040\n"
      "realloc(0x800e00000, 64) = 0x800e00100\n"
      "reallocarray(0x800e00040, 3, 24) = 0x800e00200\n"
      "memalign(64, 100) = 0x800e00400\n"
      "posix_memalign(32, 48) = 0x800e00500\n"
      "aligned_alloc(4096, 8192) = 0x800e01000\n"
      "valloc(100) = 0x800e04000\n"
      "pvalloc(5000) = 0x800e06000\n"
      "free(0x800e00100)\n"
      "free(0x800e00200)\n"
      "free(0x800e00400)\n"
      "free(0x800e00500)\n"
      "free(0x800e01000)\n"
      "free(0x800e04000)\n"
      "free(0x800e06000)\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 56), ev(Op::calloc, 2, 0, 16, 4), ev(Op::realloc, 3, 1, 64),
                             ev(Op::reallocarray, 4, 2, 24, 3), ev(Op::memalign, 5, 0, 100, 0, 64),
                             ev(Op::posix_memalign, 6, 0, 48, 0, 32), ev(Op::aligned_alloc, 7, 0, 8192, 0, 4096),
                             ev(Op::valloc, 8, 0, 100), ev(Op::pvalloc, 9, 0, 5000), ev(Op::free, 0, 3, 0),
                             ev(Op::free, 0, 4, 0), ev(Op::free, 0, 5, 0), ev(Op::free, 0, 6, 0), ev(Op::free, 0, 7, 0),
                             ev(Op::free, 0, 8, 0), ev(Op::free, 0, 9, 0)});
  EXPECT_EQ(got.events[1].requested_bytes(), 64u);
  EXPECT_EQ(got.events[3].requested_bytes(), 72u);
  EXPECT_EQ(got.rep.lines, 16u);
  EXPECT_EQ(got.rep.events, 16u);
  EXPECT_EQ(got.rep.unknown_frees + got.rep.unknown_reallocs + got.rep.reused_live + got.rep.null_results +
                got.rep.skipped_lines,
            0u);
}

TEST(CmtImport, TaggedForm) {
  // trace2cmt writes addresses without 0x and with a <tag>; the tag does not
  // take part in matching.
  const Imported got = import_text(
      "malloc(96) = 81d21e160<5>\n"
      "malloc(32) = 81d2899c0<3>\n"
      "realloc(81d21e160<5>, 200) = 81d300000<7>\n"
      "free(81d2899c0<3>)\n"
      "calloc(2, 8) = 81d400000< 12 >\n"
      "free(81d300000<9>)\n"
      "free(0x81d400000)\n"
      "malloc(1) = 0<0>\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 96), ev(Op::malloc, 2, 0, 32), ev(Op::realloc, 3, 1, 200),
                             ev(Op::free, 0, 2, 0), ev(Op::calloc, 4, 0, 8, 2), ev(Op::free, 0, 3, 0),
                             ev(Op::free, 0, 4, 0), ev(Op::malloc, 0, 0, 1, 0, 0, kFailedNull)});
  EXPECT_EQ(got.rep.unknown_frees, 0u);
}

TEST(CmtImport, WhitespaceCommentsAndBlankLines) {
  const Imported got = import_text(
      "# CMT trace\n"
      "\n"
      "   \n"
      "\t\n"
      "  # indented comment\n"
      "  malloc ( 56 )  =  0x10  \n"
      "\tcalloc(\t4 ,16\t)=0x20\n"
      "free( 0x10 )\t\n"
      "#free(0x20)\n"
      "free(0x20)");  // no newline at the end
  expect_events(got.events,
                {ev(Op::malloc, 1, 0, 56), ev(Op::calloc, 2, 0, 16, 4), ev(Op::free, 0, 1, 0), ev(Op::free, 0, 2, 0)});
  EXPECT_EQ(got.rep.lines, 10u);
  EXPECT_EQ(got.rep.skipped_lines, 6u);
  EXPECT_EQ(got.rep.events, 4u);
}

TEST(CmtImport, CrLfLineEnds) {
  const Imported got = import_text("malloc(8) = 0x10\r\n\r\n# c\r\nfree(0x10)\r\n");
  expect_events(got.events, {ev(Op::malloc, 1, 0, 8), ev(Op::free, 0, 1, 0)});
  EXPECT_EQ(got.rep.lines, 4u);
  EXPECT_EQ(got.rep.skipped_lines, 2u);
}

TEST(CmtImport, EmptyInput) {
  const Imported got = import_text("");
  EXPECT_TRUE(got.events.empty());
  EXPECT_EQ(got.rep.lines, 0u);
  EXPECT_EQ(got.rep.events, 0u);
}

TEST(CmtImport, OnlyComments) {
  const Imported got = import_text("# nothing\n\n#\n");
  EXPECT_TRUE(got.events.empty());
  EXPECT_EQ(got.rep.lines, 3u);
  EXPECT_EQ(got.rep.skipped_lines, 3u);
}

TEST(CmtImport, DoesNotCloseTheWriter) {
  TempDir dir;
  const std::string path = dir.file("more.hlt");
  trace::TraceWriter w(path, trace::WriterOptions{});
  StringInput first("malloc(8) = 0x10\n", "a.cmt");
  StringInput second("free(0x10)\nmalloc(4) = 0x10\n", "b.cmt");
  EXPECT_EQ(import_cmt_text(first, w).events, 1u);
  // A second import into the same writer starts with its own address table:
  // the free is of an unknown address.
  const CmtImportReport rep = import_cmt_text(second, w);
  EXPECT_EQ(rep.unknown_frees, 1u);
  EXPECT_EQ(rep.events, 1u);
  Event e{};
  e.op = Op::free;
  e.old = 2;
  w.append(e);
  w.close();
  expect_events(read_events(path), {ev(Op::malloc, 1, 0, 8), ev(Op::malloc, 2, 0, 4), ev(Op::free, 0, 2, 0)});
}

// ---------------------------------------------------------------------------
// Errors

struct BadLine {
  const char* line;
  const char* reason;
};

TEST(CmtErrors, GarbageLinesAreErrorsNamingTheLine) {
  const BadLine cases[] = {
      {"hello", "unknown call 'hello'"},
      {"123", "unknown call '123'"},
      {"Malloc(1) = 0x10", "unknown call 'Malloc'"},
      {"new(16) = 0x10", "unknown call 'new'"},
      {"(56) = 0x10", "expected a call such as malloc(16) = 0x1000"},
      {"= 0x10", "expected a call such as malloc(16) = 0x1000"},
      {"malloc 56 = 0x10", "expected '(' after malloc"},
      {"malloc", "expected '(' after malloc"},
      {"malloc() = 0x10", "bad argument 1 of malloc"},
      {"malloc(abc) = 0x10", "bad argument 1 of malloc"},
      {"malloc(0x) = 0x10", "bad argument 1 of malloc"},
      {"malloc(+5) = 0x10", "bad argument 1 of malloc"},
      {"calloc(1 2) = 0x10", "expected ',' between arguments"},
      {"calloc(1) = 0x10", "expected ',' between arguments"},
      {"calloc(1, x) = 0x10", "bad argument 2 of calloc"},
      {"realloc(zz, 1) = 0x10", "bad argument 1 of realloc"},
      {"reallocarray(0x10, 1) = 0x20", "expected ',' between arguments"},
      {"memalign(16) = 0x10", "expected ',' between arguments"},
      {"malloc(1, 2) = 0x10", "expected ')'"},
      {"malloc(1", "expected ')'"},
      {"malloc(1)", "expected '= ADDRESS' after the call"},
      {"malloc(1) =", "expected '= ADDRESS' after the call"},
      {"malloc(1) 0x10", "expected '= ADDRESS' after the call"},
      {"malloc(1) = zz", "expected '= ADDRESS' after the call"},
      {"malloc(1) = 0x10<", "expected '= ADDRESS' after the call"},
      {"malloc(1) = 0x10<5", "expected '= ADDRESS' after the call"},
      {"malloc(1) = 0x10<x>", "expected '= ADDRESS' after the call"},
      {"malloc(1) = 0x10 junk", "unexpected text after the call"},
      {"malloc(1) = 0x10 # trailing comment", "unexpected text after the call"},
      {"malloc(1) = 0x10;", "unexpected text after the call"},
      {"free(0x10) = 0x0", "unexpected text after the call"},
      {"free(0x10))", "unexpected text after the call"},
      {"free()", "bad argument 1 of free"},
  };
  for (const BadLine& c : cases) {
    SCOPED_TRACE(c.line);
    // Two good lines and a comment first, so the bad line is line 4.
    const std::string text =
        std::string("malloc(8) = 0x100\n# comment\nfree(0x100)\n") + c.line + "\nmalloc(1) = 0x1\n";
    EXPECT_EQ(import_error(text), std::string("t.cmt:4: ") + c.reason + ": \"" + c.line + "\"");
  }
}

TEST(CmtErrors, ErrorShowsAtMost80PrintableCharacters) {
  const std::string long_line = "malloc(1) = 0x10 " + std::string(100, 'z');
  EXPECT_EQ(import_error(long_line + "\n"),
            "t.cmt:1: unexpected text after the call: \"" + long_line.substr(0, 80) + "...\"");
  const std::string exactly80 = "malloc(1) = 0x10 " + std::string(63, 'z');
  ASSERT_EQ(exactly80.size(), 80u);
  EXPECT_EQ(import_error(exactly80), "t.cmt:1: unexpected text after the call: \"" + exactly80 + "\"");
  EXPECT_EQ(import_error(std::string("malloc(\x01") + "\x7f\xc3\xa9) = 0x10\n"),
            "t.cmt:1: bad argument 1 of malloc: \"malloc(" + std::string(4, '?') + ") = 0x10\"");
  // The CR of a CRLF line is not part of the shown text.
  EXPECT_EQ(import_error("\r\nbogus\r\n"), "t.cmt:2: unknown call 'bogus': \"bogus\"");
}

TEST(CmtErrors, ErrorNamesTheFileAndLine) {
  TempDir dir;
  const std::string path = dir.file("broken.txt");
  write_file(path,
             "malloc(16) = 0x1000\n"
             "\n"
             "# comment\n"
             "malloc(16) = 0x1000 extra\n"
             "free(0x1000)\n");
  auto in = InputStream::open(path);
  trace::TraceWriter w(dir.file("broken.hlt"), trace::WriterOptions{});
  try {
    import_cmt_text(*in, w);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ":4: unexpected text after the call: \"malloc(16) = 0x1000 extra\"");
  }
  EXPECT_EQ(w.events(), 1u);
}

TEST(CmtErrors, ErrorLineNumberInACompressedFile) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "malloc(16) = 0x" + std::to_string(1000 + i) + "\n";
  text += "free(0x1000, 2)\n";
  const std::string path = dir.file("broken.txt.gz");
  write_file(path, testutil::compress(testutil::Codec::gzip, text));
  auto in = InputStream::open(path);
  trace::TraceWriter w(dir.file("broken.hlt"), trace::WriterOptions{});
  try {
    import_cmt_text(*in, w);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ":5001: expected ')': \"free(0x1000, 2)\"");
  }
}

TEST(CmtErrors, MissingInputFile) {
  TempDir dir;
  const std::string path = dir.file("nope.txt");
  try {
    InputStream::open(path);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot open", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace heaplab::import
