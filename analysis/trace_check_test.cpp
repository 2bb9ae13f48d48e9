// Tests of `heaplab check`: valid traces pass; every problem the writer can
// produce, and several it cannot (crafted by patching the bytes of an
// uncompressed trace and repairing its checksums), are reported exactly.
#include "analysis/trace_check.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "capture/format/trace_format.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"

namespace heaplab::analysis {
namespace {

using trace::Event;
using trace::Op;
using trace::TraceReader;
using trace::WriterOptions;
using trace::testutil::alloc;
using trace::testutil::ev;
using trace::testutil::release;
using trace::testutil::TempDir;

// ------------------------------------------------------------ event builders

Event lost(uint64_t count, uint32_t thread = 0) {
  Event e = ev(Op::lost, thread);
  e.count = count;
  return e;
}

WriterOptions plain_options() {
  WriterOptions opt;
  opt.codec = trace::kCodecNone;
  return opt;
}

// The bytes of a trace of `events` (the writer fills in seq and ids).
std::string trace_image(std::vector<Event>& events, const WriterOptions& opt = plain_options()) {
  TempDir dir;
  const std::string path = dir.file("t.hlt");
  trace::testutil::write_trace(path, events, opt);
  return trace::testutil::read_file(path);
}

// Checks an image; `img` must stay alive while the reader runs, which it does
// here.
CheckReport check_image(const std::string& img, size_t max_listed = 20) {
  auto r = TraceReader::from_memory(img, "test.hlt");
  return check_trace(*r, max_listed);
}

CheckReport check_events(std::vector<Event>& events, const WriterOptions& opt = plain_options(),
                         size_t max_listed = 20) {
  const std::string img = trace_image(events, opt);
  return check_image(img, max_listed);
}

::testing::AssertionResult Listed(const CheckReport& rep, size_t i, uint64_t seq, uint32_t thread,
                                  const std::string& message) {
  if (i >= rep.listed.size())
    return ::testing::AssertionFailure() << "only " << rep.listed.size() << " problems listed";
  const CheckProblem& p = rep.listed[i];
  if (p.seq != seq || p.thread != thread || p.message != message)
    return ::testing::AssertionFailure() << "problem " << i << " is {seq " << p.seq << ", thread " << p.thread << ", \""
                                         << p.message << "\"}, expected {seq " << seq << ", thread " << thread << ", \""
                                         << message << "\"}";
  return ::testing::AssertionSuccess();
}

std::string all_messages(const CheckReport& rep) {
  std::string s;
  for (const CheckProblem& p : rep.listed)
    s += "seq " + std::to_string(p.seq) + " thread " + std::to_string(p.thread) + ": " + p.message + "\n";
  return s;
}

// ------------------------------------------------------------ crafting bytes

uint32_t load32(const std::string& img, size_t off) {
  uint32_t v;
  std::memcpy(&v, img.data() + off, 4);
  return v;
}
void store64(std::string& img, size_t off, uint64_t v) { std::memcpy(img.data() + off, &v, 8); }

// Offset of the payload of the (only) chunk of `thread` in an uncompressed image.
size_t chunk_payload(const std::string& img, uint32_t thread) {
  auto r = TraceReader::from_memory(img, "probe.hlt");
  const auto& list = r->thread_chunks(thread);
  EXPECT_EQ(list.size(), 1u);
  return r->chunks()[list.at(0)].offset + trace::kBlockHeaderSize;
}

// Offset of the ops column (col < 0) or of column `col` in the chunk payload.
size_t column_offset(const std::string& img, size_t payload, int col) {
  EXPECT_EQ(img[payload + 56], char{trace::kCodecNone});
  size_t off = payload + trace::kChunkHeaderSize;
  if (col < 0) return off;
  const size_t events = load32(img, payload + 4);
  off += events;  // one op byte each
  // Then each column: one value per event, width[i] bytes each.
  for (int i = 0; i < col; ++i) off += events * static_cast<uint8_t>(img[payload + 64 + static_cast<size_t>(i)]);
  return off;
}

// ------------------------------------------------------------ valid traces

TEST(CheckValid, HandBuiltTrace) {
  std::vector<Event> evs = {ev(Op::thread_start, 0), alloc(10), alloc(20, 1), release(1, 1), release(0), lost(42, 1),
                            ev(Op::thread_end, 0)};
  const CheckReport rep = check_events(evs);
  EXPECT_TRUE(rep.ok()) << all_messages(rep);
  EXPECT_EQ(rep.problems, 0u);
  EXPECT_TRUE(rep.listed.empty());
  EXPECT_EQ(rep.events, 7u);
  EXPECT_EQ(rep.objects, 2u);
  EXPECT_EQ(rep.lost_events, 42u);
}

TEST(CheckValid, EmptyTrace) {
  std::vector<Event> evs;
  const CheckReport rep = check_events(evs);
  EXPECT_TRUE(rep.ok()) << all_messages(rep);
  EXPECT_EQ(rep.events, 0u);
}

// Generated traces with every op kind, failures, realloc(p, 0), NULL frees
// and lost markers. Timestamps are off: with them the generator injects
// clock skew, which check rightly reports. Cross-thread frees are off too:
// the generator moves such a free to thread (owner + 1) % threads, which may
// not have had its thread_start yet.
TEST(CheckValid, RandomTracesHaveNoProblems) {
  struct Case {
    uint64_t seed;
    uint32_t chunk;
    trace::Codec codec;
  };
  for (const Case& c : {Case{1, 65536, trace::kCodecZstd}, Case{2, 100, trace::kCodecLz4},
                        Case{3, 7, trace::kCodecNone}, Case{4, 1000, trace::kCodecZstd}}) {
    trace::testutil::GenOptions g;
    g.threads = 4;
    g.all_ops = true;
    g.timestamps = false;
    g.cross_thread = 0.0;
    std::vector<Event> evs = trace::testutil::generate(c.seed, 5000, g);
    uint64_t objects = 0, lost_events = 0;
    for (const Event& e : evs) {
      objects += e.id != 0;
      if (e.op == Op::lost) lost_events += e.count;
    }
    WriterOptions opt;
    opt.chunk_events = c.chunk;
    opt.codec = c.codec;
    opt.level = 1;
    const CheckReport rep = check_events(evs, opt);
    EXPECT_EQ(rep.problems, 0u) << "seed " << c.seed << "\n" << all_messages(rep);
    EXPECT_EQ(rep.events, evs.size());
    EXPECT_EQ(rep.objects, objects);
    EXPECT_EQ(rep.lost_events, lost_events);
  }
}

TEST(CheckValid, RandomTracesWithCrossThreadFreesHaveNoProblems) {
  // Default options: 20% of frees on another thread, every op kind.
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    trace::testutil::GenOptions g;
    g.threads = 4;
    g.timestamps = false;
    std::vector<Event> evs = trace::testutil::generate(seed, 2000, g);
    WriterOptions opt;
    opt.chunk_events = 50;
    const CheckReport rep = check_events(evs, opt);
    EXPECT_EQ(rep.problems, 0u) << "seed " << seed << "\n" << all_messages(rep);
  }
}

TEST(CheckObjects, DoubleFree) {
  std::vector<Event> evs = {alloc(16, 0), alloc(32, 0), release(1, 0), release(1, 1), release(2, 1)};
  const CheckReport rep = check_events(evs);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  ASSERT_EQ(rep.listed.size(), 1u);
  EXPECT_TRUE(Listed(rep, 0, 3, 1, "free of object 1, which was already freed (double free)"));
  EXPECT_EQ(rep.events, 5u);
  EXPECT_EQ(rep.objects, 2u);
}

// Calls that are undefined for allocators (some crash on them): a sized
// delete naming another size, an aligned delete another alignment, an
// alignment that is not a power of two.
TEST(CheckObjects, WrongSizesAndAlignments) {
  Event newed = alloc(100, 0);
  newed.op = Op::op_new;
  Event aligned = alloc(64, 0);
  aligned.op = Op::aligned_alloc;
  aligned.align = 3;
  Event aligned_new = alloc(48, 0);
  aligned_new.op = Op::op_new_aligned;
  aligned_new.align = 64;
  Event sized = release(1, 0, 0, Op::op_delete_sized);
  sized.size = 5000;
  Event aligned_delete = release(3, 0, 0, Op::op_delete_aligned);
  aligned_delete.align = 32;
  // posix_memalign takes a power of two of at least a pointer: 2 and 3 are
  // noted, 8 is not.
  Event pm2 = alloc(16, 0), pm3 = alloc(16, 0), pm8 = alloc(16, 0);
  pm2.op = pm3.op = pm8.op = Op::posix_memalign;
  pm2.align = 2;
  pm3.align = 3;
  pm8.align = 8;
  std::vector<Event> evs = {newed, aligned, aligned_new, sized, release(2, 0), aligned_delete, pm2, pm3, pm8};
  const CheckReport rep = check_events(evs);
  EXPECT_EQ(rep.problems, 2u) << all_messages(rep);
  EXPECT_EQ(rep.odd_alignments, 3u);  // a note: glibc's aligned_alloc rounds 3 up, its posix_memalign fails
  EXPECT_TRUE(Listed(rep, 0, 3, 0, "delete_sized of object 1 names size 5000; it was made with 100"))
      << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 1, 5, 0, "delete_aligned of object 3 names alignment 32; it was made with 64"))
      << all_messages(rep);
}

TEST(CheckObjects, DoubleFreeByReallocAndDelete) {
  std::vector<Event> evs = {alloc(16), ev(Op::realloc), ev(Op::op_delete)};
  evs[1].old = 1;  // realloc(1) -> object 2
  evs[1].size = 64;
  evs[2].old = 1;  // delete of the object realloc already released
  const CheckReport rep = check_events(evs);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 2, 0, "delete of object 1, which was already freed (double free)"));
}

TEST(CheckObjects, FailedReallocOfAFreedObjectIsAUseAfterFree) {
  Event r = ev(Op::realloc);
  r.old = 1;
  r.size = 16;
  r.flags = trace::kFailed | trace::kNullResult;
  std::vector<Event> evs = {alloc(64), release(1), r};
  const CheckReport rep = check_events(evs);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 2, 0, "realloc of object 1, which was already freed (use after free)"));
}

TEST(CheckObjects, FailedReallocDoesNotFree) {
  std::vector<Event> evs = {alloc(16), ev(Op::realloc), release(1)};
  evs[1].old = 1;
  evs[1].size = 1u << 30;
  evs[1].flags = trace::kNullResult | trace::kFailed;
  const CheckReport rep = check_events(evs);
  EXPECT_TRUE(rep.ok()) << all_messages(rep);
  EXPECT_EQ(rep.objects, 1u);
}

TEST(CheckObjects, ReallocToZeroFrees) {
  std::vector<Event> evs = {alloc(16), ev(Op::realloc), release(1)};
  evs[1].old = 1;
  evs[1].flags = trace::kNullResult;  // realloc(p, 0) returned NULL: p is freed
  const CheckReport rep = check_events(evs);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 2, 0, "free of object 1, which was already freed (double free)"));
}

TEST(CheckObjects, MaxListedLimitsListOnly) {
  std::vector<Event> evs;
  for (int i = 0; i < 5; ++i) evs.push_back(alloc(8));
  for (uint64_t id = 1; id <= 5; ++id) evs.push_back(release(id));
  for (uint64_t id = 1; id <= 5; ++id) evs.push_back(release(id));  // seq 10..14: double frees
  const std::string img = trace_image(evs);

  const CheckReport all = check_image(img);
  EXPECT_EQ(all.problems, 5u);
  ASSERT_EQ(all.listed.size(), 5u);
  for (uint64_t id = 1; id <= 5; ++id)
    EXPECT_TRUE(Listed(all, id - 1, 9 + id, 0,
                       "free of object " + std::to_string(id) + ", which was already freed (double free)"));

  const CheckReport two = check_image(img, 2);
  EXPECT_EQ(two.problems, 5u);
  ASSERT_EQ(two.listed.size(), 2u);
  EXPECT_TRUE(Listed(two, 0, 10, 0, "free of object 1, which was already freed (double free)"));
  EXPECT_TRUE(Listed(two, 1, 11, 0, "free of object 2, which was already freed (double free)"));
  EXPECT_FALSE(two.ok());

  const CheckReport none = check_image(img, 0);
  EXPECT_EQ(none.problems, 5u);
  EXPECT_TRUE(none.listed.empty());
  EXPECT_FALSE(none.ok());
}

// ------------------------------------------------------------ thread problems

TEST(CheckThreads, EventsAfterThreadEnd) {
  std::vector<Event> evs = {
      ev(Op::thread_start, 0), alloc(8, 0),          ev(Op::thread_end, 0), alloc(8, 1), alloc(8, 0),
      release(1, 0),           ev(Op::thread_end, 0)};
  const CheckReport rep = check_events(evs);
  EXPECT_EQ(rep.problems, 3u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 4, 0, "malloc after thread_end"));
  EXPECT_TRUE(Listed(rep, 1, 5, 0, "free after thread_end"));
  EXPECT_TRUE(Listed(rep, 2, 6, 0, "thread_end after thread_end"));
}

TEST(CheckThreads, ThreadStartNotFirst) {
  std::vector<Event> evs = {ev(Op::thread_start, 1), alloc(8, 0), ev(Op::thread_start, 0), alloc(8, 1)};
  const CheckReport rep = check_events(evs);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 2, 0, "thread_start is not the thread's first event"));
}

TEST(CheckThreads, TimeGoingBackwards) {
  std::vector<Event> evs = {alloc(8, 0, 100), alloc(8, 1, 50),  // other thread: fine
                            alloc(8, 0, 100),                   // equal: fine
                            alloc(8, 0, 90), alloc(8, 1, 60)};
  WriterOptions opt = plain_options();
  opt.timestamps = true;
  const CheckReport rep = check_events(evs, opt);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 3, 0, "time goes backwards in this thread (90 ns after 100 ns)"));

  // Without timestamps there is no time to check.
  std::vector<Event> untimed = {alloc(8, 0, 100), alloc(8, 0, 90)};
  EXPECT_TRUE(check_events(untimed).ok());
}

// ------------------------------------------------------------ file problems

TEST(CheckFile, TruncatedFooter) {
  std::vector<Event> evs;
  for (int i = 0; i < 40; ++i) evs.push_back(alloc(8));
  for (uint64_t id = 1; id <= 40; ++id) evs.push_back(release(id));
  WriterOptions opt = plain_options();
  opt.chunk_events = 16;
  const std::string full = trace_image(evs, opt);
  const std::string cut = full.substr(0, full.size() - 10);
  auto r = TraceReader::from_memory(cut, "cut.hlt");
  ASSERT_FALSE(r->complete());
  const std::string footer = std::to_string(full.size() - trace::kFooterSize);
  EXPECT_EQ(r->warning(), "trace is truncated: the footer at offset " + footer +
                              " has 22 bytes of 32; read 5 complete chunks with 80 events; "
                              "events after offset " +
                              footer + " are lost");
  const CheckReport rep = check_trace(*r);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, r->warning()));
  EXPECT_EQ(rep.events, 80u);
}

TEST(CheckFile, TruncatedInsideAChunk) {
  std::vector<Event> evs;
  for (int i = 0; i < 40; ++i) evs.push_back(alloc(8));
  for (uint64_t id = 1; id <= 40; ++id) evs.push_back(release(id));
  WriterOptions opt = plain_options();
  opt.chunk_events = 16;
  const std::string full = trace_image(evs, opt);
  auto whole = TraceReader::from_memory(full, "full.hlt");
  ASSERT_EQ(whole->chunks().size(), 5u);
  const uint64_t third = whole->chunks()[2].offset;
  const std::string cut = full.substr(0, third + 20);  // inside the third chunk
  auto r = TraceReader::from_memory(cut, "cut.hlt");
  ASSERT_FALSE(r->complete());
  EXPECT_EQ(r->warning().rfind("trace is truncated: the block at offset " + std::to_string(third), 0), 0u)
      << r->warning();
  const CheckReport rep = check_trace(*r);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, r->warning()));
  EXPECT_EQ(rep.events, 32u);
  EXPECT_EQ(rep.objects, 32u);
}

TEST(CheckFile, TruncatedMultiThreadTraceHasOnlyTheTruncationProblem) {
  // Thread 1 frees what thread 0 allocated; thread 0's chunks fill first, so
  // a cut loses some of them while later chunks of thread 1 survive. The
  // references to lost objects are a note, not double frees or id gaps.
  trace::testutil::GenOptions g;
  g.threads = 2;
  g.cross_thread = 0.5;
  g.timestamps = false;
  std::vector<Event> evs = trace::testutil::generate(11, 3000, g);
  WriterOptions opt = plain_options();
  opt.chunk_events = 64;
  const std::string full = trace_image(evs, opt);
  auto whole = TraceReader::from_memory(full, "full.hlt");
  ASSERT_GT(whole->chunks().size(), 20u);
  uint64_t total_refs = 0;
  for (size_t k = 5; k < whole->chunks().size(); k += 7) {
    const std::string cut = full.substr(0, whole->chunks()[k].offset + 30);
    auto r = TraceReader::from_memory(cut, "cut.hlt");
    const CheckReport rep = check_trace(*r);
    EXPECT_EQ(rep.problems, 1u) << "cut at chunk " << k << "\n" << all_messages(rep);
    total_refs += rep.refs_to_lost_objects;
  }
  EXPECT_GT(total_refs, 0u);  // the scenario did lose objects that were referred to
}

TEST(CheckFile, MetadataNotJson) {
  std::vector<Event> evs = {alloc(8)};
  WriterOptions opt = plain_options();
  opt.metadata_json = "not json";
  CheckReport rep = check_events(evs, opt);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, "metadata block is not a JSON object"));

  opt.metadata_json = "[1, 2]";  // JSON, but not an object
  rep = check_events(evs, opt);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, "metadata block is not a JSON object"));

  // Bounded: JSON nested deeper than 64 levels, or larger than 16 MiB, is
  // not parsed (nlohmann's nodes cost 50-100x the text).
  opt.metadata_json = "{\"a\": " + std::string(65, '[') + std::string(65, ']') + "}";
  rep = check_events(evs, opt);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, "metadata block not read: nested deeper than 64 levels")) << all_messages(rep);
  opt.metadata_json = "{\"a\": \"" + std::string(100, '[') + "\", \"b\": " + std::string(63, '[') +
                      std::string(63, ']') + "}";  // brackets in strings do not count
  rep = check_events(evs, opt);
  EXPECT_EQ(rep.problems, 0u) << all_messages(rep);
  std::string wide = "{\"a\": [";
  for (int i = 0; i < 500001; ++i) wide += "{},";
  opt.metadata_json = wide + "{}]}";  // wide, not deep: 1,000,003 values
  rep = check_events(evs, opt);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, "metadata block not read: more than 1000000 values")) << all_messages(rep);
  opt.metadata_json = "{\"a\": " + std::string(64, '[') + std::string(64, ']') + "}";  // 65 levels: one too many
  rep = check_events(evs, opt);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, "metadata block not read: nested deeper than 64 levels")) << all_messages(rep);
  opt.metadata_json = "{\"a\": \"" + std::string((size_t{16} << 20) + 1, 'x') + "\"}";
  rep = check_events(evs, opt);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, "metadata block not read: larger than 16 MiB")) << all_messages(rep);

  opt.metadata_json = R"({"program": "x"})";
  EXPECT_TRUE(check_events(evs, opt).ok());
}

// ------------------------------------------------------------ crafted bytes

TEST(CheckCrafted, NonDenseIds) {
  std::vector<Event> evs = {alloc(8), alloc(8), alloc(8), release(1)};
  std::string img = trace_image(evs);
  const size_t p = chunk_payload(img, 0);
  store64(img, p + 40, 4);  // id_start: the chunk's ids become 4, 5, 6
  trace::testutil::repair_checksums(img);
  const CheckReport rep = check_image(img);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, "malloc produced object 4, expected the next dense id 1"));
  EXPECT_EQ(rep.objects, 3u);
}

TEST(CheckCrafted, FreeOfObjectThatDoesNotExistYet) {
  std::vector<Event> evs = {alloc(8), alloc(8), release(1)};
  std::string img = trace_image(evs);
  const size_t payload = chunk_payload(img, 0);
  const size_t old_col = column_offset(img, payload, trace::kColOld);
  // Old column, one byte per event: 0, 0, zigzag(ref 2 - old 1) = 2.
  ASSERT_EQ(static_cast<uint8_t>(img[payload + 64 + trace::kColOld]), 1);
  ASSERT_EQ(img.substr(old_col, 3), std::string("\x00\x00\x02", 3));
  img[old_col + 2] = 5;  // zigzag(2 - 5) = 5: free(5)
  trace::testutil::repair_checksums(img);
  const CheckReport rep = check_image(img);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 2, 0, "free of object 5, which does not exist yet"));
}

TEST(CheckCrafted, DuplicateSeq) {
  // Thread 0 has seqs 0, 2, 4 and thread 1 has 1, 3, 5.
  std::vector<Event> evs = {alloc(8, 0), lost(1, 1), alloc(8, 0), lost(1, 1), alloc(8, 0), lost(1, 1)};
  std::string img = trace_image(evs);
  const size_t seq_col = column_offset(img, chunk_payload(img, 1), trace::kColSeq);
  // Seq gaps of thread 1, one byte each: 0, 1, 1.
  ASSERT_EQ(img.substr(seq_col, 3), std::string("\x00\x01\x01", 3));
  img.replace(seq_col, 3, std::string("\x00\x00\x02", 3));  // gaps 0, 0, 2: seqs 1, 2, 5
  trace::testutil::repair_checksums(img);
  const CheckReport rep = check_image(img);
  EXPECT_EQ(rep.problems, 2u) << all_messages(rep);
  ASSERT_EQ(rep.listed.size(), 2u);
  EXPECT_EQ(rep.listed[0].seq, 2u);
  EXPECT_EQ(rep.listed[0].message, "seq 2 appears more than once");
  EXPECT_TRUE(Listed(rep, 1, 6, 0, "1 seq numbers are missing"));
  EXPECT_EQ(rep.events, 6u);
}

TEST(CheckCrafted, FlagsOnAnOpThatReturnsNothing) {
  std::vector<Event> evs = {alloc(8), release(1)};
  std::string img = trace_image(evs);
  const size_t ops = column_offset(img, chunk_payload(img, 0), -1);
  ASSERT_EQ(img[ops + 1], char{static_cast<uint8_t>(Op::free)});
  img[ops + 1] = static_cast<char>(static_cast<uint8_t>(Op::free) | trace::kOpNullBit);
  trace::testutil::repair_checksums(img);
  const CheckReport rep = check_image(img);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 1, 0, "free carries result flags, but it returns nothing"));
}

TEST(CheckCrafted, FailedWithAResult) {
  std::vector<Event> evs = {alloc(8), release(1)};
  std::string img = trace_image(evs);
  const size_t ops = column_offset(img, chunk_payload(img, 0), -1);
  ASSERT_EQ(img[ops], char{static_cast<uint8_t>(Op::malloc)});
  img[ops] = static_cast<char>(static_cast<uint8_t>(Op::malloc) | trace::kOpFailedBit);
  trace::testutil::repair_checksums(img);
  const CheckReport rep = check_image(img);
  EXPECT_EQ(rep.problems, 1u) << all_messages(rep);
  EXPECT_TRUE(Listed(rep, 0, 0, 0, "malloc failed but has a result"));
  EXPECT_EQ(rep.objects, 1u);
}

TEST(CheckCrafted, CorruptChunkThrows) {
  std::vector<Event> evs = {alloc(8), release(1)};
  std::string img = trace_image(evs);
  const size_t ops = column_offset(img, chunk_payload(img, 0), -1);
  img[ops] = 0x3f;  // op code 63 does not exist
  trace::testutil::repair_checksums(img);
  auto r = TraceReader::from_memory(img, "bad.hlt");
  EXPECT_THROW(check_trace(*r), trace::TraceError);
}

}  // namespace
}  // namespace heaplab::analysis
