// Tests of the heaptrack importer on recordings written by hand in heaptrack
// 1.4's format (heaptrack_import_test.py imports real ones made here).
#include "capture/import/heaptrack.h"

#include <gtest/gtest.h>

#include <iterator>
#include <string>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/import/input_stream.h"

namespace heaplab::import {
namespace {

using trace::Event;
using trace::testutil::TempDir;
using trace::testutil::write_file;

std::vector<std::string> import_lines(const std::string& text, HeaptrackImportReport* rep = nullptr) {
  TempDir dir;
  write_file(dir.file("in.ht"), text);
  const HeaptrackFileImport im = import_heaptrack_file(dir.file("in.ht"), dir.file("out.hlt"), {}, {"heaplab"});
  if (rep) *rep = im.report;
  auto r = trace::TraceReader::open(dir.file("out.hlt"));
  EXPECT_TRUE(r->has_time());
  std::vector<std::string> out;
  trace::MergedCursor cur(*r);
  Event buf[64];
  while (size_t n = cur.next(buf, std::size(buf)))
    for (size_t i = 0; i < n; ++i)
      out.push_back(std::string(trace::op_name(buf[i].op)) + " " + std::to_string(buf[i].size) + " " +
                    std::to_string(buf[i].old) + "->" + std::to_string(buf[i].id) + " @" + std::to_string(buf[i].time) +
                    " t" + std::to_string(buf[i].thread));
  return out;
}

const char* kHead =
    "v 10400 3\n"
    "X ./prog --flag\n"
    "I 1000 5e298f\n"
    "s a /tmp/prog\n"
    "i 7fc40c4cab9f 8 0 b 0\n"
    "t 1 0\n";

TEST(Heaptrack, EveryRecordAndTheNewestBlockOfAKind) {
  HeaptrackImportReport rep;
  const auto evs = import_lines(std::string(kHead) +
                                    "a 10 1\n"  // kind 0: 16 bytes
                                    "a 64 1\n"  // kind 1: 100 bytes
                                    "+ 0\n"     // #1
                                    "+ 0\n"     // #2
                                    "c a\n"     // 10 ms
                                    "+ 1\n"     // #3
                                    "- 0\n"     // the newest of kind 0: #2
                                    "R 3f5\n"
                                    "c 14\n"  // 20 ms
                                    "- 1\n"   // #3
                                    "- 0\n"   // #1
                                    "- 0\n"   // none live: before heaptrack
                                    "A\n"
                                    "# strings: 33\n",
                                &rep);
  EXPECT_EQ(evs, (std::vector<std::string>{"malloc 16 0->1 @0 t0", "malloc 16 0->2 @0 t0",
                                           "malloc 100 0->3 @10000000 t0", "free 0 2->0 @10000000 t0",
                                           "free 0 3->0 @20000000 t0", "free 0 1->0 @20000000 t0"}));
  EXPECT_EQ(rep.allocations, 3u);
  EXPECT_EQ(rep.deallocations, 3u);
  EXPECT_EQ(rep.unknown_frees, 1u);
  EXPECT_EQ(rep.first_unknown_free_line, 18u);
  EXPECT_EQ(rep.kinds, 2u);
  EXPECT_EQ(rep.times, 2u);
  EXPECT_EQ(rep.version, 0x10400u);
  EXPECT_EQ(rep.file_format, 3u);
  EXPECT_EQ(rep.command, "./prog --flag");
}

TEST(Heaptrack, BadRecordingsNameTheirPlace) {
  const auto error = [](const std::string& text) {
    try {
      import_lines(text);
    } catch (const InputError& e) {
      const std::string m = e.what();
      return m.substr(m.find("in.ht"));
    }
    return std::string("accepted");
  };
  EXPECT_EQ(
      error("v 10400 9\n"),
      "in.ht:1: heaptrack file format 9 is not one heaplab reads (heaptrack 1.2 to 1.4 write 2 and 3): 'v 10400 9'");
  EXPECT_EQ(error("a 10 1\n+ 0\n"), "in.ht:2: a call before the 'v' line: not a heaptrack recording: '+ 0'");
  EXPECT_EQ(error(std::string(kHead) + "+ 0\n"),
            "in.ht:7: allocation kind 0 not defined by an 'a' line before it: '+ 0'");
  EXPECT_EQ(error(std::string(kHead) + "a 10 zz\n"), "in.ht:7: expected 'a SIZE TRACE' in hex: 'a 10 zz'");
  EXPECT_EQ(error(std::string(kHead) + "a 10 1\n+ 0 1\n"), "in.ht:8: expected '+ KIND' in hex: '+ 0 1'");
  EXPECT_EQ(error(std::string(kHead) + "Q 1\nS leak:foo\n"), "accepted");  // a newer kind, a suppression: skipped
  EXPECT_EQ(error(std::string(kHead) + "* 1\n"), "in.ht:7: expected a record letter: '* 1'");
  EXPECT_EQ(error(std::string(kHead) + "malloc(16) = 0x10\n"),
            "in.ht:7: expected a one-letter record and a space: 'malloc(16) = 0x10'");
  EXPECT_EQ(error("X ./prog\n"), "in.ht: no 'v' line: not a heaptrack recording");
  EXPECT_EQ(error(std::string(kHead) + "c ffffffffffffffff\n"),
            "in.ht:7: a time beyond what 64-bit ns can hold: 'c ffffffffffffffff'");
}

}  // namespace
}  // namespace heaplab::import
