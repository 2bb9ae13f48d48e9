// Tests of `heaplab stats` (compute_stats and its JSON/text renderings) on
// hand-built traces whose every number is known by construction, plus
// consistency properties on generated traces.
#include "analysis/trace_stats.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

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

__extension__ typedef unsigned __int128 u128;

constexpr unsigned idx(Op op) { return static_cast<unsigned>(op); }

// ------------------------------------------------------------ event builders

Event calloc_ev(uint64_t count, uint64_t size, uint32_t thread = 0, uint64_t time = 0) {
  Event e = ev(Op::calloc, thread, time);
  e.count = count;
  e.size = size;
  return e;
}
Event realloc_ev(uint64_t old, uint64_t size, uint8_t flags = 0, uint32_t thread = 0, uint64_t time = 0) {
  Event e = ev(Op::realloc, thread, time);
  e.old = old;
  e.size = size;
  e.flags = flags;
  return e;
}
Event lost(uint64_t count, uint32_t thread = 0, uint64_t time = 0) {
  Event e = ev(Op::lost, thread, time);
  e.count = count;
  return e;
}
Event failed(Event e) {
  e.flags = trace::kNullResult | trace::kFailed;
  return e;
}

// Writes `events` (the writer fills in seq and ids) and computes the stats.
TraceStats stats_of(std::vector<Event>& events, bool timestamps = false, uint32_t chunk_events = 65536) {
  TempDir dir;
  WriterOptions opt;
  opt.timestamps = timestamps;
  opt.chunk_events = chunk_events;
  const std::string path = dir.file("t.hlt");
  trace::testutil::write_trace(path, events, opt);
  auto r = TraceReader::open(path);
  return compute_stats(*r);
}

// ------------------------------------------------------------ counts

TEST(StatsCounts, PerOpPerThreadAndFailed) {
  std::vector<Event> evs = {
      ev(Op::thread_start, 0),          // 0
      alloc(8, 0),                      // 1  id 1
      calloc_ev(3, 4, 0),               // 2  id 2
      failed(alloc(1u << 30, 0)),       // 3  no object
      release(1, 0),                    // 4
      release(0, 0),                    // 5  free(NULL)
      ev(Op::thread_start, 1),          // 6
      alloc(16, 1),                     // 7  id 3  (op changed below)
      release(3, 1, 0, Op::op_delete),  // 8
      lost(7, 1),                       // 9
      lost(5, 0),                       // 10
      failed(calloc_ev(2, 8, 1)),       // 11 no object
      ev(Op::thread_end, 1),            // 12
  };
  evs[7].op = Op::op_new;
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.events, 13u);
  EXPECT_EQ(s.threads, 2u);
  EXPECT_FALSE(s.has_time);

  std::array<uint64_t, trace::kOpCount> ops{};
  ops[idx(Op::thread_start)] = 2;
  ops[idx(Op::malloc)] = 2;
  ops[idx(Op::calloc)] = 2;
  ops[idx(Op::free)] = 2;
  ops[idx(Op::op_new)] = 1;
  ops[idx(Op::op_delete)] = 1;
  ops[idx(Op::lost)] = 2;
  ops[idx(Op::thread_end)] = 1;
  EXPECT_EQ(s.ops, ops);

  std::array<uint64_t, trace::kOpCount> failed_ops{};
  failed_ops[idx(Op::malloc)] = 1;
  failed_ops[idx(Op::calloc)] = 1;
  EXPECT_EQ(s.failed, failed_ops);

  ASSERT_EQ(s.thread_ops.size(), 2u);
  std::array<uint64_t, trace::kOpCount> t0{}, t1{};
  t0[idx(Op::thread_start)] = 1;
  t0[idx(Op::malloc)] = 2;
  t0[idx(Op::calloc)] = 1;
  t0[idx(Op::free)] = 2;
  t0[idx(Op::lost)] = 1;
  t1[idx(Op::thread_start)] = 1;
  t1[idx(Op::op_new)] = 1;
  t1[idx(Op::op_delete)] = 1;
  t1[idx(Op::lost)] = 1;
  t1[idx(Op::calloc)] = 1;
  t1[idx(Op::thread_end)] = 1;
  EXPECT_EQ(s.thread_ops[0], t0);
  EXPECT_EQ(s.thread_ops[1], t1);
  EXPECT_EQ(s.thread_events, (std::vector<uint64_t>{7, 6}));

  EXPECT_EQ(s.objects_created, 3u);
  EXPECT_EQ(s.objects_freed, 2u);
  EXPECT_EQ(s.objects_freed_by_other_thread, 0u);
  EXPECT_EQ(s.live_objects_end, 1u);
  EXPECT_EQ(s.null_frees, 1u);
  EXPECT_EQ(s.unknown_frees, 0u);
  EXPECT_EQ(s.lost_events, 12u);
  EXPECT_EQ(s.bytes_requested, 8u + 12u + 16u);
  EXPECT_EQ(s.live_bytes_end, 12u);
}

// Metadata past common/json.h's bounds is not read, and stats says so
// (text and JSON), instead of leaving the capture's figures out silently.
TEST(StatsCounts, MetadataNotReadIsSaid) {
  TempDir dir;
  WriterOptions opt;
  opt.metadata_json = std::string(100, '[');
  std::vector<Event> evs = {alloc(8)};
  const std::string path = dir.file("t.hlt");
  trace::testutil::write_trace(path, evs, opt);
  const TraceStats s = compute_stats(*TraceReader::open(path));
  EXPECT_EQ(s.metadata_not_read, "nested deeper than 64 levels");
  EXPECT_NE(stats_to_text(s).find("note: the metadata was not read (nested deeper than 64 levels): what it says of "
                                  "the capture is left out\n"),
            std::string::npos);
  EXPECT_EQ(stats_to_json(s)["metadata_not_read"], "nested deeper than 64 levels");
}

// A capture of several threads whose shim cost was taken off thread by
// thread (no capture.time_correction: an older heaplab's) is said to read
// short in ns (text and JSON); one with the field, of one thread, without a
// shim cost or without times is not.
TEST(StatsCounts, OldPerThreadTimesAreSaid) {
  TempDir dir;
  const auto stats = [&](const std::string& meta, bool times, uint32_t threads) {
    WriterOptions opt;
    opt.metadata_json = meta;
    opt.timestamps = times;
    std::vector<Event> evs;
    for (uint32_t t = 0; t < threads; ++t) evs.push_back(alloc(8, t, 10 * (t + 1)));
    const std::string path = dir.file("t.hlt");
    trace::testutil::write_trace(path, evs, opt);
    return compute_stats(*TraceReader::open(path));
  };
  const std::string old = R"({"capture":{"shim_cost_ns":500}})";
  const TraceStats s = stats(old, true, 2);
  EXPECT_TRUE(s.times_per_thread);
  EXPECT_NE(stats_to_text(s).find(
                "warning: the trace's times had the shim's cost taken off thread by thread "
                "(normalised by a heaplab from before capture.time_correction): a busy thread's "
                "times could sit still while another thread wrote, and its lifetimes in ns read "
                "short (many at 0); capture the program again, or normalise its kept raw files again (heaplab "
                "import --from heaplab-raw)\n"),
            std::string::npos)
      << stats_to_text(s);
  EXPECT_EQ(stats_to_json(s)["times_per_thread"], true);
  EXPECT_FALSE(
      stats(R"({"capture":{"shim_cost_ns":500,"time_correction":"largest_thread_cost"}})", true, 2).times_per_thread);
  EXPECT_FALSE(stats(old, true, 1).times_per_thread);
  EXPECT_FALSE(stats(old, false, 2).times_per_thread);
  EXPECT_FALSE(stats(R"({"capture":{"shim_cost_ns":0}})", true, 2).times_per_thread);
  EXPECT_FALSE(stats(R"({"capture":{"shim_cost_ns":"500"}})", true, 2).times_per_thread);
  EXPECT_FALSE(stats_to_json(stats("{}", true, 2)).contains("times_per_thread"));
}

TEST(StatsCounts, CrossThreadFrees) {
  std::vector<Event> evs;
  for (int i = 0; i < 10; ++i) evs.push_back(alloc(64, 0));            // producer: ids 1..10
  for (uint64_t id = 1; id <= 4; ++id) evs.push_back(release(id, 1));  // consumer frees 4
  for (uint64_t id = 5; id <= 6; ++id) evs.push_back(release(id, 0));  // producer frees 2
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.objects_created, 10u);
  EXPECT_EQ(s.objects_freed, 6u);
  EXPECT_EQ(s.objects_freed_by_other_thread, 4u);
  EXPECT_DOUBLE_EQ(s.cross_thread_free_fraction(), 4.0 / 6.0);
  EXPECT_EQ(s.live_objects_end, 4u);
  EXPECT_EQ(s.live_bytes_end, 4u * 64u);
  EXPECT_EQ(s.thread_events, (std::vector<uint64_t>{12, 4}));
}

TEST(StatsCounts, NoFreesMeansZeroFraction) {
  std::vector<Event> evs = {alloc(1), alloc(2)};
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.objects_freed, 0u);
  EXPECT_EQ(s.cross_thread_free_fraction(), 0.0);
}

TEST(StatsCounts, NullFreesAndLostEvents) {
  std::vector<Event> evs = {
      release(0, 0, 0, Op::free),             // free(NULL)
      release(0, 0, 0, Op::op_delete),        // delete nullptr
      release(0, 1, 0, Op::op_delete_array),  // delete[] nullptr
      realloc_ev(0, 40),                      // realloc(NULL, 40): an allocation, id 1
      lost(100),
      lost(0),
      lost(uint64_t{1} << 40, 1),
      release(1),
  };
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.null_frees, 3u);
  EXPECT_EQ(s.unknown_frees, 0u);
  EXPECT_EQ(s.objects_created, 1u);
  EXPECT_EQ(s.objects_freed, 1u);
  EXPECT_EQ(s.lost_events, 100u + (uint64_t{1} << 40));
  EXPECT_EQ(s.ops[idx(Op::lost)], 3u);
}

// ------------------------------------------------------------ peaks

TEST(StatsPeak, KnownByConstruction) {
  std::vector<Event> evs = {
      alloc(100),  // seq 0, id 1: 100
      alloc(200),  // seq 1, id 2: 300  <- peak bytes, 2 objects
      release(1),  // seq 2: 200
      alloc(50),   // seq 3, id 3: 250, 2 objects again (not a new peak)
  };
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.live_bytes.value, 300u);
  EXPECT_EQ(s.live_bytes.seq, 1u);
  EXPECT_EQ(s.live_bytes.time, 0u);
  EXPECT_EQ(s.live_objects_at_bytes_peak, 2u);
  EXPECT_EQ(s.live_objects.value, 2u);
  EXPECT_EQ(s.live_objects.seq, 1u);
  EXPECT_EQ(s.live_bytes_end, 250u);
  EXPECT_EQ(s.live_objects_end, 2u);
  EXPECT_EQ(s.bytes_requested, 350u);
}

TEST(StatsPeak, BytesAndObjectPeaksDiffer) {
  std::vector<Event> evs = {
      alloc(1000, 0, 10),  // seq 0, id 1: 1000 bytes, 1 object
      alloc(10, 0, 20),    // seq 1, id 2: 1010 <- bytes peak, 2 objects
      release(1, 1, 30),   // seq 2: 10
      alloc(10, 1, 40),    // seq 3, id 3: 20, 2 objects
      alloc(10, 0, 50),    // seq 4, id 4: 30, 3 objects <- objects peak
      release(2, 0, 60),   // seq 5: 20
  };
  const TraceStats s = stats_of(evs, /*timestamps=*/true);
  EXPECT_TRUE(s.has_time);
  EXPECT_EQ(s.first_time, 10u);
  EXPECT_EQ(s.last_time, 60u);
  EXPECT_EQ(s.live_bytes.value, 1010u);
  EXPECT_EQ(s.live_bytes.seq, 1u);
  EXPECT_EQ(s.live_bytes.time, 20u);
  EXPECT_EQ(s.live_objects_at_bytes_peak, 2u);
  EXPECT_EQ(s.live_objects.value, 3u);
  EXPECT_EQ(s.live_objects.seq, 4u);
  EXPECT_EQ(s.live_objects.time, 50u);
  EXPECT_EQ(s.live_bytes_end, 20u);
  EXPECT_EQ(s.live_objects_end, 2u);
  EXPECT_EQ(s.objects_freed_by_other_thread, 1u);
}

// Clocks of different threads need not follow seq order: times are relative
// to the earliest one, so the peak's offset and the duration never underflow.
TEST(StatsPeak, TimesRelativeToEarliestEvent) {
  std::vector<Event> evs = {
      ev(Op::thread_start, 0, 2000),  // seq 0
      alloc(64, 1, 1500),             // seq 1, id 1: peak, earlier than seq 0
      ev(Op::thread_end, 0, 4000),    // seq 2
  };
  const TraceStats s = stats_of(evs, /*timestamps=*/true);
  EXPECT_EQ(s.first_time, 1500u);
  EXPECT_EQ(s.last_time, 4000u);
  EXPECT_EQ(s.live_bytes.time, 1500u);
  const nlohmann::json j = stats_to_json(s);
  EXPECT_EQ(j["duration_ns"].get<uint64_t>(), 2500u);
  const std::string text = stats_to_text(s);
  EXPECT_NE(text.find("peak live bytes: 64 at seq 1 (1 objects live then), t=0.000000 s\n"), std::string::npos) << text;
  EXPECT_NE(text.find("duration: 0.000003 s\n"), std::string::npos) << text;
}

TEST(StatsPeak, ReallocMovesBytes) {
  std::vector<Event> evs = {
      alloc(100),                                                // seq 0, id 1: 100
      realloc_ev(1, 300),                                        // seq 1, id 2: 300 (peak)
      realloc_ev(2, 1000, trace::kNullResult | trace::kFailed),  // seq 2: failed, 2 stays
      realloc_ev(2, 0, trace::kNullResult),                      // seq 3: realloc(p, 0) frees 2
      realloc_ev(0, 40),                                         // seq 4, id 3: 40
      calloc_ev(10, 20),                                         // seq 5, id 4: 240
  };
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.objects_created, 4u);
  EXPECT_EQ(s.objects_freed, 2u);
  EXPECT_EQ(s.null_frees, 0u);
  EXPECT_EQ(s.unknown_frees, 0u);
  EXPECT_EQ(s.ops[idx(Op::realloc)], 4u);
  EXPECT_EQ(s.failed[idx(Op::realloc)], 1u);
  EXPECT_EQ(s.live_bytes.value, 300u);
  EXPECT_EQ(s.live_bytes.seq, 1u);
  EXPECT_EQ(s.live_objects_at_bytes_peak, 1u);
  EXPECT_EQ(s.live_objects.value, 2u);
  EXPECT_EQ(s.live_objects.seq, 5u);
  EXPECT_EQ(s.live_bytes_end, 240u);
  EXPECT_EQ(s.live_objects_end, 2u);
  EXPECT_EQ(s.bytes_requested, 100u + 300u + 40u + 200u);
  // Lifetimes: id 1 lived 1 event (seq 0 -> 1), id 2 lived 2 (seq 1 -> 3).
  EXPECT_EQ(s.lifetime_events.samples, 2u);
  EXPECT_EQ(s.lifetime_events.buckets[1], 1u);
  EXPECT_EQ(s.lifetime_events.buckets[2], 1u);
}

TEST(StatsPeak, FailedReallocKeepsOldObject) {
  std::vector<Event> evs = {
      alloc(500),  // id 1
      realloc_ev(1, 100000, trace::kNullResult | trace::kFailed),
      release(1),  // still live: a normal free
  };
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.objects_freed, 1u);
  EXPECT_EQ(s.unknown_frees, 0u);
  EXPECT_EQ(s.live_bytes.value, 500u);
  EXPECT_EQ(s.live_bytes_end, 0u);
  EXPECT_EQ(s.live_objects_end, 0u);
}

TEST(StatsPeak, CallocSaturates) {
  std::vector<Event> evs = {
      calloc_ev(uint64_t{1} << 32, uint64_t{1} << 33),  // seq 0, id 1: 2^65 -> UINT64_MAX
      alloc(100),                                       // seq 1, id 2
      release(1),                                       // seq 2
  };
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.bytes_requested, UINT64_MAX);
  EXPECT_EQ(s.sizes.buckets[64], 1u);
  EXPECT_EQ(s.live_bytes.value, UINT64_MAX);
  EXPECT_EQ(s.live_bytes.seq, 0u);
  EXPECT_EQ(s.live_objects_at_bytes_peak, 1u);
  // The 100-byte object is still live.
  EXPECT_EQ(s.live_bytes_end, 100u);
}

TEST(StatsPeak, LiveBytesSumSaturatesAndRecovers) {
  const uint64_t half = uint64_t{1} << 63;
  std::vector<Event> evs = {
      alloc(half),  // seq 0, id 1: 2^63
      alloc(half),  // seq 1, id 2: 2^64 -> saturated
      alloc(7),     // seq 2, id 3: still saturated
      release(1),   // seq 3: 2^63 + 7
      release(3),   // seq 4: 2^63
  };
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.live_bytes.value, UINT64_MAX);
  EXPECT_EQ(s.live_bytes.seq, 1u);
  EXPECT_EQ(s.live_objects_at_bytes_peak, 2u);
  EXPECT_EQ(s.live_bytes_end, half);
  EXPECT_EQ(s.bytes_requested, UINT64_MAX);
}

// ------------------------------------------------------------ histograms

TEST(StatsHistogram, BucketOf) {
  EXPECT_EQ(Log2Histogram::bucket_of(0), 0u);
  EXPECT_EQ(Log2Histogram::bucket_of(1), 1u);
  EXPECT_EQ(Log2Histogram::bucket_of(2), 2u);
  EXPECT_EQ(Log2Histogram::bucket_of(3), 2u);
  EXPECT_EQ(Log2Histogram::bucket_of(4), 3u);
  EXPECT_EQ(Log2Histogram::bucket_of(1023), 10u);
  EXPECT_EQ(Log2Histogram::bucket_of(1024), 11u);
  EXPECT_EQ(Log2Histogram::bucket_of(uint64_t{1} << 63), 64u);
  EXPECT_EQ(Log2Histogram::bucket_of(UINT64_MAX), 64u);
}

TEST(StatsHistogram, SizeBuckets) {
  std::vector<Event> evs;
  for (uint64_t size : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4}, uint64_t{7}, uint64_t{8},
                        uint64_t{1023}, uint64_t{1024}, UINT64_MAX})
    evs.push_back(alloc(size));
  evs.push_back(calloc_ev(3, 5));  // 15 bytes: bucket 4
  evs.push_back(calloc_ev(0, 5));  // 0 bytes: bucket 0
  const TraceStats s = stats_of(evs);
  std::array<uint64_t, 65> expected{};
  expected[0] = 2;
  expected[1] = 1;
  expected[2] = 2;
  expected[3] = 2;
  expected[4] = 2;
  expected[10] = 1;
  expected[11] = 1;
  expected[64] = 1;
  EXPECT_EQ(s.sizes.buckets, expected);
  EXPECT_EQ(s.sizes.samples, 12u);
  EXPECT_EQ(s.lifetime_events.samples, 0u);
  EXPECT_EQ(s.lifetime_ns.samples, 0u);
}

TEST(StatsHistogram, LifetimesInEventsAndNanoseconds) {
  std::vector<Event> evs = {
      alloc(8, 0, 100),     // seq 0, id 1
      alloc(8, 0, 200),     // seq 1, id 2
      alloc(8, 1, 300),     // seq 2, id 3
      release(1, 0, 100),   // seq 3: id 1 lived 3 events, 0 ns
      release(2, 1, 1224),  // seq 4: id 2 lived 3 events, 1024 ns
      alloc(8, 0, 1300),    // seq 5, id 4
      release(4, 0, 1301),  // seq 6: id 4 lived 1 event, 1 ns
      release(3, 1, 1400),  // seq 7: id 3 lived 5 events, 1100 ns
  };
  const TraceStats s = stats_of(evs, /*timestamps=*/true);
  std::array<uint64_t, 65> events{};
  events[1] = 1;  // 1
  events[2] = 2;  // 3, 3
  events[3] = 1;  // 5
  EXPECT_EQ(s.lifetime_events.buckets, events);
  EXPECT_EQ(s.lifetime_events.samples, 4u);
  std::array<uint64_t, 65> ns{};
  ns[0] = 1;   // 0
  ns[1] = 1;   // 1
  ns[11] = 2;  // 1024, 1100
  EXPECT_EQ(s.lifetime_ns.buckets, ns);
  EXPECT_EQ(s.lifetime_ns.samples, 4u);
}

TEST(StatsHistogram, NoNanosecondLifetimesWithoutTimestamps) {
  std::vector<Event> evs = {alloc(8, 0, 100), release(1, 0, 5000)};
  const TraceStats s = stats_of(evs);
  EXPECT_EQ(s.lifetime_events.samples, 1u);
  EXPECT_EQ(s.lifetime_ns.samples, 0u);
}

// ------------------------------------------------------------ output

// A tiny trace covering every kind of line and key: two threads, timestamps,
// a cross-thread free, a failed call, a free(NULL) and a lost marker.
std::vector<Event> tiny_trace() {
  return {
      alloc(100, 0, 1000),                        // seq 0, id 1
      calloc_ev(4, 50, 1, 1500),                  // seq 1, id 2 (200 bytes): peak 300
      release(1, 1, 2500),                        // seq 2: cross-thread, lived 2 events/1500 ns
      failed(alloc(uint64_t{1} << 20, 0, 3000)),  // seq 3
      release(0, 0, 3100),                        // seq 4: free(NULL)
      lost(3, 1, 3200),                           // seq 5
  };
}

TEST(StatsOutput, JsonGolden) {
  std::vector<Event> evs = tiny_trace();
  const TraceStats s = stats_of(evs, /*timestamps=*/true);
  const nlohmann::json j = stats_to_json(s);
  const std::string expected =
      R"({"bytes_requested":300,"duration_ns":2200,"events":6,)"
      R"("failed":{"malloc":1},"has_time":true,)"
      R"("lifetime_by_size_class":[{"events_histogram":{"buckets":[{"count":1,"max":3,"min":2}],)"
      R"("samples":1},"freed":1,"ns_histogram":{"buckets":[{"count":1,"max":2047,"min":1024}],)"
      R"("samples":1},"size_max":127,"size_min":64}],)"
      R"("lifetime_events_histogram":{"buckets":[{"count":1,"max":3,"min":2}],"samples":1},)"
      R"("lifetime_ns_histogram":{"buckets":[{"count":1,"max":2047,"min":1024}],"samples":1},)"
      R"("live_bytes_at_end":200,"lost_events":3,)"
      R"("objects":{"created":2,"cross_thread_free_fraction":1.0,"freed":1,)"
      R"("freed_by_other_thread":1,"live_at_end":1,"null_frees":1,"unknown_frees":0},)"
      R"("operations":{"calloc":1,"free":2,"lost":1,"malloc":2},)"
      R"("peak_live_bytes":{"bytes":300,"objects":2,"seq":1,"time_ns":1500},)"
      R"("peak_live_objects":{"objects":2,"seq":1,"time_ns":1500},)"
      R"("per_thread":[{"events":3,"operations":{"free":1,"malloc":2},"thread":0},)"
      R"({"events":3,"operations":{"calloc":1,"free":1,"lost":1},"thread":1}],)"
      R"("size_histogram":{"buckets":[{"count":1,"max":127,"min":64},)"
      R"({"count":1,"max":255,"min":128}],"samples":2},"threads":2})";
  EXPECT_EQ(j.dump(), expected);

  // The key structure, spelled out.
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"bytes_requested", "duration_ns", "events", "failed", "has_time",
                                      "lifetime_by_size_class", "lifetime_events_histogram", "lifetime_ns_histogram",
                                      "live_bytes_at_end", "lost_events", "objects", "operations", "peak_live_bytes",
                                      "peak_live_objects", "per_thread", "size_histogram", "threads"}));
  EXPECT_EQ(j["peak_live_bytes"]["bytes"].get<uint64_t>(), 300u);
  EXPECT_EQ(j["peak_live_bytes"]["seq"].get<uint64_t>(), 1u);
  EXPECT_EQ(j["peak_live_bytes"]["time_ns"].get<uint64_t>(), 1500u);
  EXPECT_EQ(j["objects"]["cross_thread_free_fraction"].get<double>(), 1.0);
  EXPECT_EQ(j["per_thread"][1]["operations"]["lost"].get<uint64_t>(), 1u);
}

TEST(StatsOutput, JsonWithoutTimestampsHasNoTimeKeys) {
  std::vector<Event> evs = tiny_trace();
  const TraceStats s = stats_of(evs);
  const nlohmann::json j = stats_to_json(s);
  EXPECT_FALSE(j.contains("duration_ns"));
  EXPECT_FALSE(j.contains("lifetime_ns_histogram"));
  EXPECT_FALSE(j["peak_live_bytes"].contains("time_ns"));
  EXPECT_FALSE(j["peak_live_objects"].contains("time_ns"));
  EXPECT_EQ(j["has_time"], false);
  EXPECT_EQ(j["peak_live_bytes"].dump(), R"({"bytes":300,"objects":2,"seq":1})");
}

TEST(StatsOutput, JsonHugeHistogramBucket) {
  std::vector<Event> evs = {alloc(UINT64_MAX)};
  const nlohmann::json j = stats_to_json(stats_of(evs));
  EXPECT_EQ(j["size_histogram"].dump(),
            R"({"buckets":[{"count":1,"max":18446744073709551615,"min":9223372036854775808}],)"
            R"("samples":1})");
}

TEST(StatsOutput, TextGolden) {
  std::vector<Event> evs = tiny_trace();
  const TraceStats s = stats_of(evs, /*timestamps=*/true);
  const std::string expected =
      "events: 6 in 2 threads\n"
      "duration: 0.000002 s\n"
      "lost events (capture overflow): 3\n"
      "operations:\n"
      "  malloc                                  2  (1 failed)\n"
      "  calloc                                  1\n"
      "  free                                    2\n"
      "  lost                                    1\n"
      "per thread (events; top operations):\n"
      "  thread 0                  3  malloc=2 free=1\n"
      "  thread 1                  3  calloc=1 free=1 lost=1\n"
      "objects: 2 created, 1 freed (100.00% by another thread), 1 live at end\n"
      "frees of NULL: 1\n"
      "bytes requested: 300\n"
      "peak live bytes: 300 at seq 1 (2 objects live then), t=0.000000 s\n"
      "peak live objects: 2 at seq 1, t=0.000000 s\n"
      "live bytes at end: 200\n"
      "request sizes in bytes (log2 buckets):\n"
      "  64..127                                           1  50.0%  ########################################\n"
      "  128..255                                          1  50.0%  ########################################\n"
      "lifetimes in events (log2 buckets):\n"
      "  2..3                                              1 100.0%  ########################################\n"
      "lifetimes in ns (log2 buckets):\n"
      "  1,024..2,047                                      1 100.0%  ########################################\n"
      "lifetimes by size class (log2 buckets of the median and the 90th percentile):\n"
      "  size (bytes)                  freed  median (events)          p90 (events)             median (ns)       "
      "             p90 (ns)\n"
      "  64..127                           1  2..3                     2..3                     1,024..2,047      "
      "             1,024..2,047\n";
  EXPECT_EQ(stats_to_text(s), expected);
}

TEST(StatsOutput, TextSingleThreadNoTimestamps) {
  std::vector<Event> evs = {alloc(1500), alloc(2500), release(1)};
  const std::string expected =
      "events: 3 in 1 thread (no timestamps)\n"
      "operations:\n"
      "  malloc                                  2\n"
      "  free                                    1\n"
      "objects: 2 created, 1 freed (0.00% by another thread), 1 live at end\n"
      "bytes requested: 4,000\n"
      "peak live bytes: 4,000 at seq 1 (2 objects live then)\n"
      "peak live objects: 2 at seq 1\n"
      "live bytes at end: 2,500\n"
      "request sizes in bytes (log2 buckets):\n"
      "  1,024..2,047                                      1  50.0%  ########################################\n"
      "  2,048..4,095                                      1  50.0%  ########################################\n"
      "lifetimes in events (log2 buckets):\n"
      "  2..3                                              1 100.0%  ########################################\n"
      "lifetimes by size class (log2 buckets of the median and the 90th percentile):\n"
      "  size (bytes)                  freed  median (events)          p90 (events)\n"
      "  1,024..2,047                      1  2..3                     2..3\n";
  EXPECT_EQ(stats_to_text(stats_of(evs)), expected);
}

// A size class from 2^36 bytes on is wider than the column was: the column
// widens, and the counts stay under their head.
TEST(StatsOutput, WideSizeClassesStayInTheirColumns) {
  std::vector<Event> evs = {alloc(20), alloc(uint64_t{100} << 30), release(1), release(2)};
  const std::string text = stats_to_text(stats_of(evs));
  const std::string table = text.substr(text.find("lifetimes by size class"));
  EXPECT_EQ(table,
            "lifetimes by size class (log2 buckets of the median and the 90th percentile):\n"
            "  size (bytes)                           freed  median (events)          p90 (events)\n"
            "  16..31                                     1  2..3                     2..3\n"
            "  68,719,476,736..137,438,953,471            1  2..3                     2..3\n");
}

// ------------------------------------------------------------ properties

// A reference model of the live set, with an exact (128-bit) byte sum.
struct Reference {
  std::array<uint64_t, trace::kOpCount> ops{};
  uint64_t created = 0, freed = 0, null_frees = 0, lost = 0;
  uint64_t peak_bytes = 0, peak_seq = 0, live_objects_end = 0, live_bytes_end = 0;
};

Reference reference(const std::vector<Event>& evs) {
  Reference ref;
  std::vector<uint64_t> bytes_of(1, 0);
  std::vector<uint8_t> live(1, 0);
  u128 live_bytes = 0;
  uint64_t live_objects = 0;
  auto clamp = [](u128 v) { return v > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(v); };
  for (const Event& e : evs) {
    ++ref.ops[idx(e.op)];
    if (e.op == Op::lost) ref.lost += e.count;
    if (trace::op_consumes(e.op) && !(e.flags & trace::kFailed)) {
      if (e.old == 0) {
        if (!trace::op_produces(e.op)) ++ref.null_frees;
      } else if (live[e.old]) {
        live[e.old] = 0;
        live_bytes -= bytes_of[e.old];
        --live_objects;
        ++ref.freed;
      }
    }
    if (e.id != 0) {
      bytes_of.push_back(e.requested_bytes());
      live.push_back(1);
      live_bytes += e.requested_bytes();
      ++live_objects;
      ++ref.created;
      if (clamp(live_bytes) > ref.peak_bytes) {
        ref.peak_bytes = clamp(live_bytes);
        ref.peak_seq = e.seq;
      }
    }
  }
  ref.live_objects_end = live_objects;
  ref.live_bytes_end = clamp(live_bytes);
  return ref;
}

TEST(StatsProperty, RandomTracesMatchDirectCounts) {
  for (uint64_t seed : {11u, 12u, 13u}) {
    trace::testutil::GenOptions g;
    g.threads = 4;
    std::vector<Event> evs = trace::testutil::generate(seed, 5000, g);
    const TraceStats s = stats_of(evs, /*timestamps=*/true, /*chunk_events=*/512);
    const Reference ref = reference(evs);
    uint64_t with_id = 0;
    std::vector<uint64_t> per_thread(4, 0);
    for (const Event& e : evs) {
      with_id += e.id != 0;
      ++per_thread[e.thread];
    }
    EXPECT_EQ(s.events, evs.size()) << seed;
    EXPECT_EQ(s.ops, ref.ops) << seed;
    EXPECT_EQ(s.objects_created, with_id) << seed;
    EXPECT_EQ(s.objects_created, ref.created) << seed;
    EXPECT_EQ(s.objects_freed, ref.freed) << seed;
    EXPECT_EQ(s.unknown_frees, 0u) << seed;
    EXPECT_EQ(s.null_frees, ref.null_frees) << seed;
    EXPECT_EQ(s.lost_events, ref.lost) << seed;
    EXPECT_EQ(s.live_objects_end, ref.live_objects_end) << seed;
    EXPECT_EQ(s.live_bytes_end, ref.live_bytes_end) << seed;
    EXPECT_EQ(s.live_bytes.value, ref.peak_bytes) << seed;
    EXPECT_EQ(s.live_bytes.seq, ref.peak_seq) << seed;
    EXPECT_EQ(s.thread_events, per_thread) << seed;
    EXPECT_EQ(s.sizes.samples, s.objects_created) << seed;
    EXPECT_EQ(s.lifetime_events.samples, s.objects_freed) << seed;
    EXPECT_EQ(s.lifetime_ns.samples, s.objects_freed) << seed;
    EXPECT_EQ(s.objects_created - s.objects_freed, s.live_objects_end) << seed;
    // The JSON is well-formed and agrees.
    const nlohmann::json j = stats_to_json(s);
    EXPECT_EQ(j["events"].get<uint64_t>(), evs.size());
    EXPECT_EQ(j["objects"]["created"].get<uint64_t>(), with_id);
  }
}

}  // namespace
}  // namespace heaplab::analysis
