// Tests of glibc's mtrace importer: a log made on this machine by a victim
// under libc_malloc_debug.so (exact events), the sample log, and bad input.
#include "capture/import/mtrace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/look_ahead.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/import/input_stream.h"
#include "common/process.h"

namespace heaplab::import {
namespace {

using trace::Event;
using trace::Op;
using trace::testutil::source_dir;
using trace::testutil::TempDir;
using trace::testutil::write_file;

std::vector<Event> read_events(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  std::vector<Event> events;
  trace::MergedCursor cur(*r);
  Event buf[256];
  while (size_t n = cur.next(buf, std::size(buf))) events.insert(events.end(), buf, buf + n);
  return events;
}

// "op size old->id [failed]" per event.
std::vector<std::string> describe(const std::vector<Event>& evs) {
  std::vector<std::string> out;
  for (const Event& e : evs)
    out.push_back(std::string(trace::op_name(e.op)) + " " + std::to_string(e.size) + " " + std::to_string(e.old) +
                  "->" + std::to_string(e.id) + ((e.flags & trace::kFailed) ? " failed" : "") + " t" +
                  std::to_string(e.thread));
  return out;
}

MtraceFileImport import_text(const TempDir& dir, const std::string& text, std::vector<Event>* events = nullptr) {
  write_file(dir.file("in.mtrace"), text);
  MtraceFileImport im = import_mtrace_file(dir.file("in.mtrace"), dir.file("out.hlt"), {}, {"heaplab", "import"});
  if (events) *events = read_events(dir.file("out.hlt"));
  return im;
}

// The victim's calls, logged by glibc's own mtrace on this machine.
TEST(Mtrace, ALogMadeHereByGlibc) {
  const std::string debug = "/lib/x86_64-linux-gnu/libc_malloc_debug.so.0";
  if (!std::filesystem::exists(debug)) GTEST_SKIP() << debug << " not installed (glibc 2.34 on has it)";
  TempDir dir;
  process::Spec spec;
  spec.argv = {VICTIM_MTRACE};
  spec.env = {{"MALLOC_TRACE", dir.file("victim.mtrace")}, {"LD_PRELOAD", debug}};
  const process::Output o = process::run(spec);
  ASSERT_TRUE(process::succeeded(o.status)) << process::describe_status(o.status);
  const MtraceFileImport im = import_mtrace_file(dir.file("victim.mtrace"), dir.file("out.hlt"), {}, {"heaplab"});
  EXPECT_EQ(im.report.lines, 21u);
  EXPECT_EQ(im.report.events, 17u);
  EXPECT_EQ(im.report.traces, 1u);
  EXPECT_EQ(im.report.unknown_frees, 1u);  // the block made before mtrace()
  EXPECT_EQ(im.report.first_unknown_free_line, 17u);
  EXPECT_EQ(im.report.failed, 2u);
  EXPECT_EQ(im.report.unpaired_reallocs, 0u);
  const uint64_t huge = SIZE_MAX / 2;
  EXPECT_EQ(
      describe(read_events(dir.file("out.hlt"))),
      (std::vector<std::string>{"malloc 16 0->1 t0", "malloc 32 0->2 t0", "realloc 100 1->3 t0", "malloc 200 0->4 t0",
                                "malloc 300 0->5 t0", "malloc 512 0->6 t0", "free 0 2->0 t0", "free 0 4->0 t0",
                                "free 0 5->0 t0", "free 0 6->0 t0", "malloc 40 0->7 t0", "free 0 7->0 t0",
                                "malloc " + std::to_string(huge) + " 0->0 failed t0",
                                "realloc " + std::to_string(huge) + " 3->0 failed t0", "free 0 3->0 t0",
                                "malloc 0 0->8 t0", "free 0 8->0 t0"}));
}

// The sample log (a thread, ld.so's own allocation, every kind of line).
TEST(Mtrace, SampleLog) {
  TempDir dir;
  const MtraceFileImport im =
      import_mtrace_file(source_dir() + "/capture/testdata/mtrace/sample.mtrace", dir.file("out.hlt"), {}, {"heaplab"});
  EXPECT_EQ(im.report.lines, 20u);
  EXPECT_EQ(im.report.events, 17u);
  EXPECT_EQ(im.report.failed, 1u);
  EXPECT_EQ(im.report.unknown_frees, 0u);
  const std::vector<Event> evs = read_events(dir.file("out.hlt"));
  EXPECT_EQ(std::count_if(evs.begin(), evs.end(), [](const Event& e) { return e.op == Op::malloc; }), 9);  // one failed
  EXPECT_EQ(std::count_if(evs.begin(), evs.end(), [](const Event& e) { return e.op == Op::free; }),
            7);  // one is realloc(p, 0)
  EXPECT_EQ(std::count_if(evs.begin(), evs.end(), [](const Event& e) { return e.op == Op::realloc; }), 1);
}

TEST(Mtrace, CallersWithSpacesAndSymbolsAndUnpairedReallocs) {
  TempDir dir;
  std::vector<Event> evs;
  const MtraceFileImport im = import_text(dir,
                                          "= Start\n"
                                          "@ /opt/my app/bin:(main+0x1c)[0x401136] + 0x1000 0x10\n"
                                          "@ [0x7f0000001000] + 0x2000 0x20\r\n"
                                          "@ x:[0x1] < 0x1000\n"
                                          "@ x:[0x2] - 0x2000\n"
                                          "@ x:[0x1] < 0x9999\n"
                                          "@ x:[0x3] + 0x3000 0\n"  // a bare 0 size, as glibc writes it
                                          "@ x:[0x4] < 0x3000\n"
                                          "@ x:[0x4] > (nil) 0x10\n"  // a failed realloc: the block stays
                                          "= End\n",
                                          &evs);
  EXPECT_EQ(im.report.events, 5u);
  EXPECT_EQ(im.report.unpaired_reallocs, 2u);  // both "<" lines: the block at 0x1000 stays live
  EXPECT_EQ(describe(evs), (std::vector<std::string>{"malloc 16 0->1 t0", "malloc 32 0->2 t0", "free 0 2->0 t0",
                                                     "malloc 0 0->3 t0", "realloc 16 3->0 failed t0"}));
}

// More blocks live than the importer's table holds before it reads calls
// ahead of the one it takes (look_ahead.h's kLookAheadFrom): 70,000 blocks
// made, then freed in a shuffled order, some moved by a realloc first, some
// made again at their freed address, and frees of blocks never made (the
// first one's line named): the events are a model's, in order. Then a bad
// line after 100 calls: the calls before it were all written.
TEST(Mtrace, MoreCallsThanTheLookAheadMatchAModel) {
  std::string text = "= Start\n";
  uint64_t line = 1, next_id = 0, first_unknown = 0, unknown = 0;
  std::map<uint64_t, uint64_t> live;  // address -> id
  std::vector<std::string> want;
  char buf[96];
  const auto make = [&](uint64_t addr, uint64_t size) {
    std::snprintf(buf, sizeof buf, "@ x:[0x1] + %#" PRIx64 " %#" PRIx64 "\n", addr, size);
    text += buf;
    ++line;
    live[addr] = ++next_id;
    want.push_back("malloc " + std::to_string(size) + " 0->" + std::to_string(next_id) + " t0");
  };
  const auto release = [&](uint64_t addr) {
    std::snprintf(buf, sizeof buf, "@ x:[0x2] - %#" PRIx64 "\n", addr);
    text += buf;
    ++line;
    const auto it = live.find(addr);
    if (it == live.end()) {
      if (unknown++ == 0) first_unknown = line;
      return;
    }
    want.push_back("free 0 " + std::to_string(it->second) + "->0 t0");
    live.erase(it);
  };
  const auto move = [&](uint64_t from, uint64_t to, uint64_t size) {
    std::snprintf(buf, sizeof buf, "@ x:[0x3] < %#" PRIx64 "\n@ x:[0x3] > %#" PRIx64 " %#" PRIx64 "\n", from, to, size);
    text += buf;
    line += 2;
    const uint64_t old = live.at(from);
    live.erase(from);
    live[to] = ++next_id;
    want.push_back("realloc " + std::to_string(size) + " " + std::to_string(old) + "->" + std::to_string(next_id) +
                   " t0");
  };
  std::vector<uint64_t> addrs;
  static_assert(kLookAheadFrom < 70000);
  for (uint64_t i = 0; i < 70000; ++i) {
    addrs.push_back(0x10000 + 32 * i);
    make(addrs.back(), i + 1);
  }
  std::mt19937_64 rng(7);
  std::shuffle(addrs.begin(), addrs.end(), rng);
  for (size_t k = 0; k < addrs.size(); ++k) {
    uint64_t a = addrs[k];
    if (k % 7 == 0) {
      move(a, 0x900000 + 32 * k, 1000 + k);
      a = 0x900000 + 32 * k;
    }
    if (k % 50 == 10) release(0xdead000 + 16 * k);  // never made
    release(a);
    if (k % 40 == 3) make(a, 7);  // the same address again
  }
  TempDir dir;
  std::vector<Event> evs;
  const MtraceFileImport im = import_text(dir, text, &evs);
  EXPECT_EQ(im.report.events, want.size());
  EXPECT_EQ(im.report.unknown_frees, unknown);
  EXPECT_EQ(unknown, 1400u);
  EXPECT_EQ(im.report.first_unknown_free_line, first_unknown);
  EXPECT_EQ(describe(evs), want);

  // A bad line after 70,000 blocks made (some still waiting in the
  // look-ahead): every call before it is in the writer.
  std::string bad;
  for (uint64_t i = 0; i < 70000; ++i) {
    std::snprintf(buf, sizeof buf, "@ x:[0x1] + %#" PRIx64 " 0x10\n", 0x10000 + 32 * i);
    bad += buf;
  }
  bad += "@ x:[0x1] * 0x10\n";
  write_file(dir.file("bad.mtrace"), bad);
  auto in = InputStream::open(dir.file("bad.mtrace"));
  trace::TraceWriter w(dir.file("bad.hlt"), trace::WriterOptions{});
  try {
    import_mtrace(*in, w);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.mtrace:70001: no call in the line"), std::string::npos) << e.what();
  }
  EXPECT_EQ(w.events(), 70000u);
}

TEST(Mtrace, BadLinesNameTheirPlace) {
  const auto error = [](const std::string& text) {
    TempDir dir;
    try {
      import_text(dir, text);
    } catch (const InputError& e) {
      const std::string m = e.what();
      return m.substr(m.find("in.mtrace:"));
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("= Start\nmalloc(16) = 0x10\n"),
            "in.mtrace:2: expected a call line (@ CALLER + ADDRESS SIZE, - ADDRESS, < ADDRESS, > ADDRESS SIZE or ! "
            "ADDRESS SIZE): 'malloc(16) = 0x10'");
  EXPECT_EQ(error("@ x:[0x1] + 0x10 16\n"),
            "in.mtrace:1: expected ADDRESS SIZE in hex after '+': '@ x:[0x1] + 0x10 16'");
  EXPECT_EQ(error("@ x:[0x1] - zzz\n"), "in.mtrace:1: expected an ADDRESS in hex after '-': '@ x:[0x1] - zzz'");
  EXPECT_EQ(error("@ x:[0x1] > 0x10 0x20\n"),
            "in.mtrace:1: a '>' line without the '<' line before it: '@ x:[0x1] > 0x10 0x20'");
  EXPECT_EQ(error("@ x:[0x1] * 0x10\n"), "in.mtrace:1: no call in the line (+, -, <, > or !): '@ x:[0x1] * 0x10'");
  EXPECT_EQ(error("= Begin\n"), "in.mtrace:1: expected '= Start' or '= End': '= Begin'");
}

}  // namespace
}  // namespace heaplab::import
