// Tests of the Firefox logalloc importer: a log written from logalloc's
// documented syntax (threads, every function, another process, arenas),
// the munged form, the older form without TIDs, and bad lines.
#include "capture/import/logalloc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
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

namespace heaplab::import {
namespace {

using trace::Event;
using trace::testutil::source_dir;
using trace::testutil::TempDir;
using trace::testutil::write_file;

std::vector<std::string> events_of(const std::string& path, std::vector<uint64_t>* tids = nullptr) {
  auto r = trace::TraceReader::open(path);
  std::vector<std::string> out;
  trace::MergedCursor cur(*r);
  Event buf[64];
  while (size_t n = cur.next(buf, std::size(buf)))
    for (size_t i = 0; i < n; ++i)
      out.push_back(std::string(trace::op_name(buf[i].op)) + " " + std::to_string(buf[i].count) + "x" +
                    std::to_string(buf[i].size) + " a" + std::to_string(buf[i].align) + " " +
                    std::to_string(buf[i].old) + "->" + std::to_string(buf[i].id) + " t" +
                    std::to_string(buf[i].thread));
  if (tids)
    for (uint32_t t : r->active_threads()) tids->push_back(r->thread_info(t).os_tid);
  return out;
}

TEST(Logalloc, SampleLogWithThreads) {
  TempDir dir;
  const LogallocFileImport im = import_logalloc_file(source_dir() + "/capture/testdata/logalloc/sample.log",
                                                     dir.file("out.hlt"), {}, {"heaplab"});
  const LogallocImportReport& rep = im.report;
  EXPECT_EQ(rep.lines, 22u);
  EXPECT_EQ(rep.events, 17u);
  EXPECT_EQ(rep.threads, 3u);
  EXPECT_EQ(rep.pid, 4242u);
  EXPECT_EQ(rep.other_process_lines, 1u);
  EXPECT_EQ(rep.skipped_calls, 3u);  // jemalloc_stats, moz_create_arena, moz_dispose_arena
  EXPECT_EQ(rep.unknown_frees, 1u);
  EXPECT_EQ(rep.first_unknown_free_line, 22u);
  std::vector<uint64_t> tids;
  EXPECT_EQ(events_of(dir.file("out.hlt"), &tids),
            (std::vector<std::string>{"malloc 0x42 a0 0->1 t0", "calloc 2x16 a0 0->2 t0", "malloc 0x100 a0 0->3 t1",
                                      "free 0x0 a0 1->0 t1",  // a block of thread 0 freed by thread 1
                                      "realloc 0x64 a0 2->4 t0", "memalign 0x200 a64 0->5 t0",
                                      "posix_memalign 0x300 a128 0->6 t2", "aligned_alloc 0x512 a256 0->7 t2",
                                      "valloc 0x4096 a0 0->8 t0", "malloc 0x24 a0 0->9 t1", "free 0x0 a0 9->0 t1",
                                      "realloc 0x0 a0 8->0 t0", "free 0x0 a0 4->0 t0", "free 0x0 a0 3->0 t2",
                                      "free 0x0 a0 5->0 t0", "free 0x0 a0 6->0 t2", "free 0x0 a0 7->0 t2"}));
  EXPECT_EQ(tids, (std::vector<uint64_t>{4242, 4243, 4244}));
}

TEST(Logalloc, MungedAndOlderForms) {
  TempDir dir;
  write_file(dir.file("munged.log"),
             "1 1 malloc(16)=#1\n"
             "1 2 realloc(#1,32)=#1\n"
             "1 1 free(#1)\n");
  const LogallocFileImport m = import_logalloc_file(dir.file("munged.log"), dir.file("m.hlt"), {}, {"heaplab"});
  EXPECT_EQ(m.report.events, 3u);
  EXPECT_EQ(events_of(dir.file("m.hlt")),
            (std::vector<std::string>{"malloc 0x16 a0 0->1 t0", "realloc 0x32 a0 1->2 t1", "free 0x0 a0 2->0 t0"}));
  write_file(dir.file("old.log"), "77 malloc(5)=0x10\n77 free(0x10)\n");
  const LogallocFileImport o = import_logalloc_file(dir.file("old.log"), dir.file("o.hlt"), {}, {"heaplab"});
  EXPECT_EQ(o.report.threads, 1u);
  EXPECT_EQ(events_of(dir.file("o.hlt")), (std::vector<std::string>{"malloc 0x5 a0 0->1 t0", "free 0x0 a0 1->0 t0"}));
}

// More blocks live than the importer's table holds before it reads calls
// ahead of the one it takes (look_ahead.h's kLookAheadFrom): 70,000 blocks
// made by three threads, freed in a shuffled order by others, with
// free(NULL) lines (nothing), failed mallocs (no object), and frees of
// blocks never made, one from a thread with no other call (not a thread of
// the trace; the first such free's line named): the events are a model's.
TEST(Logalloc, MoreCallsThanTheLookAheadMatchAModel) {
  std::string text;
  uint64_t line = 0, next_id = 0, first_unknown = 0, unknown = 0;
  std::map<uint64_t, uint64_t> live;  // address -> id
  std::vector<std::string> want;
  const auto hex = [](uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "%#" PRIx64, v);
    return std::string(b);
  };
  const auto call = [&](uint64_t tid, const std::string& c) {
    text += "1 " + std::to_string(tid) + " " + c + "\n";
    ++line;
  };
  std::vector<uint64_t> addrs;
  static_assert(kLookAheadFrom < 70000);
  for (uint64_t i = 0; i < 70000; ++i) {
    const uint64_t a = 0x10000 + 32 * i, t = i % 3;
    call(100 + t, "malloc(" + std::to_string(i + 1) + ")=" + hex(a));
    live[a] = ++next_id;
    want.push_back("malloc 0x" + std::to_string(i + 1) + " a0 0->" + std::to_string(next_id) + " t" +
                   std::to_string(t));
    addrs.push_back(a);
    if (i % 45 == 7) {
      call(100 + t, "malloc(5)=(nil)");
      want.push_back("malloc 0x5 a0 0->0 t" + std::to_string(t));
    }
  }
  std::mt19937_64 rng(11);
  std::shuffle(addrs.begin(), addrs.end(), rng);
  for (size_t k = 0; k < addrs.size(); ++k) {
    const uint64_t t = (k + 1) % 3;
    if (k % 60 == 5) {
      call(k == 5 ? 999 : 100 + t, "free(" + hex(0xdead000 + 16 * k) + ")");  // never made
      if (unknown++ == 0) first_unknown = line;
    }
    if (k % 30 == 2) call(100 + t, "free((nil))");
    call(100 + t, "free(" + hex(addrs[k]) + ")");
    want.push_back("free 0x0 a0 " + std::to_string(live.at(addrs[k])) + "->0 t" + std::to_string(t));
  }
  TempDir dir;
  write_file(dir.file("many.log"), text);
  const LogallocFileImport im = import_logalloc_file(dir.file("many.log"), dir.file("many.hlt"), {}, {"heaplab"});
  EXPECT_EQ(im.report.events, want.size());
  EXPECT_EQ(im.report.threads, 3u);
  EXPECT_EQ(unknown, 1167u);
  EXPECT_EQ(im.report.unknown_frees, unknown);
  EXPECT_EQ(im.report.first_unknown_free_line, first_unknown);
  std::vector<uint64_t> tids;
  EXPECT_EQ(events_of(dir.file("many.hlt"), &tids), want);
  EXPECT_EQ(tids, (std::vector<uint64_t>{100, 101, 102}));
}

TEST(Logalloc, BadLinesNameTheirPlace) {
  const auto error = [](const std::string& text) {
    TempDir dir;
    write_file(dir.file("in.log"), text);
    try {
      import_logalloc_file(dir.file("in.log"), dir.file("out.hlt"), {}, {"heaplab"});
    } catch (const InputError& e) {
      const std::string m = e.what();
      return m.substr(m.find("in.log:"));
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("malloc(16)=0x10\n"), "in.log:1: expected 'PID TID function(args)=result': 'malloc(16)=0x10'");
  EXPECT_EQ(error("1 1 mallok(16)=0x10\n"), "in.log:1: unknown function 'mallok': '1 1 mallok(16)=0x10'");
  EXPECT_EQ(error("1 1 malloc(16)\n"), "in.log:1: expected '=POINTER' after the call: '1 1 malloc(16)'");
  EXPECT_EQ(error("1 1 malloc(x)=0x10\n"), "in.log:1: bad argument 1 of malloc: '1 1 malloc(x)=0x10'");
  EXPECT_EQ(error("1 1 calloc(2)=0x10\n"), "in.log:1: too few arguments: '1 1 calloc(2)=0x10'");
  EXPECT_EQ(error("1 1 malloc(1,2)=0x10\n"), "in.log:1: too many arguments: '1 1 malloc(1,2)=0x10'");
  EXPECT_EQ(error("1 1 free(0x10)=0x20\n"), "in.log:1: unexpected text after the call: '1 1 free(0x10)=0x20'");
  EXPECT_EQ(error("x 1 malloc(1)=0x10\n"), "in.log:1: expected a PID first: 'x 1 malloc(1)=0x10'");
  EXPECT_EQ(error("1 1 calloc(4294967296,4294967297)=0x10\n"),
            "in.log:1: a calloc whose count times size overflows cannot have succeeded: "
            "'1 1 calloc(4294967296,4294967297)=0x10'");
}

}  // namespace
}  // namespace heaplab::import
