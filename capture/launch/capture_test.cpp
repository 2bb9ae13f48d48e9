// End-to-end tests of `heaplab capture` (launch::run_capture): the victim
// programs of capture/testprogs run under the LD_PRELOAD shim, their raw
// captures are normalised, and the traces are read back. Each scenario of the
// victims brackets its calls with malloc(777001)+free and malloc(777002)+free
// markers; the tests take the events between the begin marker's free and the
// end marker's malloc and assert them exactly, so whatever libc and libstdc++
// allocate around them does not matter.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocators/library.h"
#include "analysis/trace_check.h"
#include "analysis/trace_stats.h"
#include "capture/format/event.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/launch/launcher.h"
#include "capture/shim/raw_format.h"
#include "capture/shim/rseq_area.h"
#include "capture/launch/method.h"
#include "capture/normalise/raw_live.h"
#include "common/process.h"

#ifndef HEAPLAB_TEST_BINARY_DIR
#define HEAPLAB_TEST_BINARY_DIR "."
#endif

namespace {

namespace fs = std::filesystem;
using heaplab::launch::CaptureOptions;
using heaplab::launch::CaptureResult;
using heaplab::launch::LaunchError;
using heaplab::launch::TraceResult;
using heaplab::trace::Event;
using heaplab::trace::kFailed;
using heaplab::trace::kNullResult;
using heaplab::trace::Op;
using heaplab::trace::TraceReader;
using heaplab::trace::testutil::TempDir;

constexpr uint64_t kBegin = 777001, kEnd = 777002;
constexpr uint8_t kNullFailed = kNullResult | kFailed;

std::string binary_dir() {
  const char* env = std::getenv("HEAPLAB_BINARY_DIR");
  return env && *env ? env : HEAPLAB_TEST_BINARY_DIR;
}
std::string shim_path() { return binary_dir() + "/cli/libheaplab_capture.so"; }
std::string victim(const std::string& name) { return binary_dir() + "/capture/testprogs/" + name; }

CaptureOptions options(const TempDir& dir, std::vector<std::string> argv) {
  CaptureOptions opt;
  opt.argv = std::move(argv);
  opt.output = dir.file("out.hlt");
  opt.shim = shim_path();
  return opt;
}

std::string describe(const Event& e) {
  std::ostringstream s;
  s << "#" << e.seq << " t" << e.thread << " " << heaplab::trace::op_name(e.op);
  if (e.id) s << " id=" << e.id;
  if (e.old) s << " old=" << e.old;
  if (e.size) s << " size=" << e.size;
  if (e.align) s << " align=" << e.align;
  if (e.count) s << " count=" << e.count;
  if (e.flags) s << " flags=" << unsigned(e.flags);
  return s.str();
}

std::string describe(const std::vector<Event>& evs, size_t max = 80) {
  std::string s;
  for (size_t i = 0; i < evs.size() && i < max; ++i) s += "  " + describe(evs[i]) + "\n";
  if (evs.size() > max) s += "  ... (" + std::to_string(evs.size() - max) + " more)\n";
  return s;
}

std::vector<Event> read_events(const std::string& path) {
  auto r = TraceReader::open(path);
  return heaplab::trace::testutil::read_all(*r);
}

bool is_thread_marker(const Event& e) { return e.op == Op::thread_start || e.op == Op::thread_end; }

// The events strictly between the free of the begin marker and the malloc
// of the end marker (both on the marker thread). With `same_thread`, only
// the marker thread's events. Fails the test (and returns nothing) when the
// markers are not found.
std::optional<std::vector<Event>> between_markers(const std::vector<Event>& evs, bool same_thread,
                                                  bool need_end = true) {
  size_t i = 0;
  uint64_t begin_id = 0;
  uint32_t thread = 0;
  for (; i < evs.size(); ++i)
    if (evs[i].op == Op::malloc && evs[i].size == kBegin && evs[i].id) {
      begin_id = evs[i].id;
      thread = evs[i].thread;
      break;
    }
  if (!begin_id) {
    ADD_FAILURE() << "no malloc(777001) begin marker in the trace:\n" << describe(evs, 40);
    return std::nullopt;
  }
  for (++i; i < evs.size(); ++i)
    if (evs[i].op == Op::free && evs[i].old == begin_id) break;
  if (i == evs.size()) {
    ADD_FAILURE() << "the begin marker is never freed";
    return std::nullopt;
  }
  std::vector<Event> out;
  bool ended = false;
  for (++i; i < evs.size(); ++i) {
    const Event& e = evs[i];
    if (e.op == Op::malloc && e.size == kEnd && e.thread == thread) {
      ended = true;
      break;
    }
    if (same_thread && e.thread != thread) continue;
    out.push_back(e);
  }
  if (need_end && !ended) {
    ADD_FAILURE() << "no malloc(777002) end marker after the begin marker";
    return std::nullopt;
  }
  return out;
}

// One expected event. `id`: label of the object it produces ("" = none: the
// event's id must be 0); `old`: label of the object it consumes ("" = NULL).
struct Want {
  Op op;
  uint64_t size = 0;
  uint64_t align = 0;
  uint64_t count = 0;
  uint8_t flags = 0;
  std::string id;
  std::string old;
};

std::string describe(const Want& w) {
  std::ostringstream s;
  s << heaplab::trace::op_name(w.op);
  if (!w.id.empty()) s << " id=" << w.id;
  if (!w.old.empty()) s << " old=" << w.old;
  if (w.size) s << " size=" << w.size;
  if (w.align) s << " align=" << w.align;
  if (w.count) s << " count=" << w.count;
  if (w.flags) s << " flags=" << unsigned(w.flags);
  return s.str();
}

// Asserts `got` is exactly `want`, field by field, with object identities
// followed through labels. Returns the label -> id map.
std::map<std::string, uint64_t> expect_sequence(const std::vector<Event>& got, const std::vector<Want>& want) {
  std::map<std::string, uint64_t> ids;
  const bool had_failure = ::testing::Test::HasFailure();
  std::string listing = "got:\n" + describe(got, 200) + "want:\n";
  for (const Want& w : want) listing += "  " + describe(w) + "\n";
  EXPECT_EQ(got.size(), want.size()) << listing;
  if (got.size() != want.size()) return ids;
  std::set<uint64_t> seen;
  for (size_t k = 0; k < want.size(); ++k) {
    const Event& e = got[k];
    const Want& w = want[k];
    SCOPED_TRACE("event " + std::to_string(k) + ": got " + describe(e) + ", want " + describe(w));
    EXPECT_EQ(e.op, w.op);
    EXPECT_EQ(e.size, w.size);
    EXPECT_EQ(e.align, w.align);
    EXPECT_EQ(e.count, w.count);
    EXPECT_EQ(unsigned(e.flags), unsigned(w.flags));
    if (w.old.empty()) {
      EXPECT_EQ(e.old, 0u);
    } else {
      auto it = ids.find(w.old);
      if (it == ids.end()) {
        ADD_FAILURE() << "bad test: label " << w.old << " used before it was produced";
      } else {
        EXPECT_EQ(e.old, it->second) << "releases the wrong object";
      }
    }
    if (w.id.empty()) {
      EXPECT_EQ(e.id, 0u);
    } else {
      EXPECT_NE(e.id, 0u);
      EXPECT_TRUE(seen.insert(e.id).second) << "id " << e.id << " produced twice";
      ids[w.id] = e.id;
    }
  }
  if (!had_failure && ::testing::Test::HasFailure()) ADD_FAILURE() << listing;
  return ids;
}

// The events `lost` markers say were lost, and the thread "(lost)" holds them.
uint64_t lost_in(const std::string& path) {
  auto r = TraceReader::open(path);
  uint64_t n = 0;
  for (const Event& e : heaplab::trace::testutil::read_all(*r)) {
    if (e.op != Op::lost) continue;
    n += e.count;
    std::string name = "?";
    for (const auto& [index, info] : r->thread_table())
      if (index == e.thread) name = info.name;
    EXPECT_EQ(name, "(lost)");
  }
  return n;
}

void expect_trace_ok(const std::string& path) {
  auto r = TraceReader::open(path);
  heaplab::analysis::CheckReport rep = heaplab::analysis::check_trace(*r);
  std::string problems;
  for (const auto& p : rep.listed)
    problems += "  #" + std::to_string(p.seq) + " t" + std::to_string(p.thread) + ": " + p.message + "\n";
  EXPECT_TRUE(rep.ok()) << path << ": " << rep.problems << " problems:\n" << problems;
  EXPECT_TRUE(r->complete()) << r->warning();
}

nlohmann::json capture_metadata(const std::string& path) {
  auto r = TraceReader::open(path);
  nlohmann::json m = nlohmann::json::parse(r->metadata(), nullptr, false);
  if (m.is_discarded() || !m.contains("capture")) {
    ADD_FAILURE() << "metadata without a capture object: " << r->metadata();
    return nlohmann::json::object();
  }
  return m["capture"];
}

std::string failed_list(const CaptureResult& r) {
  std::string s;
  for (const auto& f : r.failed) s += "  " + f + "\n";
  return s;
}

// The exact calls of `victim_c single` (glibc: realloc(p, 0) frees p and
// returns NULL).
std::vector<Want> single_sequence() {
  return {
      {Op::malloc, 10, 0, 0, 0, "A", ""},
      {Op::calloc, 8, 0, 3, 0, "B", ""},
      {Op::realloc, 100, 0, 0, 0, "C", "A"},
      {Op::realloc, 5, 0, 0, 0, "D", ""},
      {Op::free, 0, 0, 0, 0, "", ""},
      {Op::free, 0, 0, 0, 0, "", "B"},
      {Op::realloc, 0, 0, 0, kNullResult, "", "D"},
      {Op::malloc, SIZE_MAX, 0, 0, kNullFailed, "", ""},
      {Op::free, 0, 0, 0, 0, "", "C"},
  };
}

// Runs with fd 1 redirected to `path` (run_capture lets the program inherit
// stdout).
CaptureResult run_with_stdout(const CaptureOptions& opt, const std::string& path) {
  std::fflush(stdout);
  int saved = dup(1);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (saved < 0 || fd < 0) throw std::runtime_error("cannot redirect stdout");
  dup2(fd, 1);
  ::close(fd);
  CaptureResult r;
  try {
    r = heaplab::launch::run_capture(opt);
  } catch (...) {
    dup2(saved, 1);
    ::close(saved);
    throw;
  }
  dup2(saved, 1);
  ::close(saved);
  return r;
}

// ---------------------------------------------------------------------------

TEST(Capture, SingleThreadExactSequence) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  const TraceResult& t = r.traces[0];
  EXPECT_EQ(t.path, opt.output);
  EXPECT_GT(t.pid, 0u);
  EXPECT_EQ(t.exec_generation, 0u);
  EXPECT_EQ(t.report.threads, 1u);
  EXPECT_EQ(t.report.unknown_frees, 0u);
  EXPECT_EQ(t.report.holes, 0u);
  EXPECT_EQ(t.report.bad_records, 0u);
  EXPECT_EQ(t.report.unfinished_reallocs, 0u);
  EXPECT_TRUE(t.report.clean_exit);
  ASSERT_GE(t.command_line.size(), 2u);
  EXPECT_EQ(t.command_line[1], "single");

  std::vector<Event> evs = read_events(t.path);
  auto mid = between_markers(evs, false);
  ASSERT_TRUE(mid);
  expect_sequence(*mid, single_sequence());
  for (const Event& e : evs) EXPECT_EQ(e.thread, evs.front().thread) << describe(e);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.front().op, Op::thread_start);
  EXPECT_EQ(evs.back().op, Op::thread_end);
  expect_trace_ok(t.path);

  nlohmann::json cap = capture_metadata(t.path);
  EXPECT_EQ(cap.value("allocator", ""), "glibc");
  EXPECT_EQ(cap.value("exit_code", -1), 0);
  EXPECT_FALSE(cap.contains("signal"));

  auto rd = TraceReader::open(t.path);
  heaplab::analysis::TraceStats st = heaplab::analysis::compute_stats(*rd);
  EXPECT_EQ(st.threads, 1u);
  EXPECT_GE(st.ops[size_t(Op::calloc)], 1u);
  EXPECT_GE(st.failed[size_t(Op::malloc)], 1u);
}

// `victim_cpp api`, captured once for the tests below.
struct ApiCapture {
  TempDir dir;
  CaptureResult result;
  std::vector<Event> mid;  // the marker thread's events between the markers
  bool ok = false;

  ApiCapture() {
    CaptureOptions opt = options(dir, {victim("victim_cpp"), "api"});
    result = heaplab::launch::run_capture(opt);
    if (result.traces.size() != 1) return;
    auto m = between_markers(read_events(result.traces[0].path), true);
    if (!m) return;
    mid = std::move(*m);
    ok = true;
  }
};

// Destroyed (its directory removed) at exit.
const ApiCapture& api_capture() {
  static const ApiCapture cap;
  return cap;
}

constexpr uint64_t kHuge = SIZE_MAX / 2;

// Every call of `victim_cpp api`, in order. libstdc++'s allocation of the
// std::bad_alloc exception (a malloc after the failed throwing new, freed
// when the catch block ends) is not in this list: see ApiExceptionAllocation.
std::vector<Want> api_sequence() {
  return {
      {Op::malloc, 16, 0, 0, 0, "p", ""},
      {Op::calloc, 10, 0, 4, 0, "c", ""},
      {Op::realloc, 32, 0, 0, 0, "p2", "p"},
      {Op::reallocarray, 6, 0, 5, 0, "ra", ""},
      {Op::reallocarray, 6, 0, 7, 0, "ra2", "ra"},
      {Op::memalign, 100, 64, 0, 0, "m", ""},
      {Op::posix_memalign, 200, 128, 0, 0, "pm", ""},
      {Op::posix_memalign, 10, 3, 0, kNullFailed, "", ""},  // EINVAL: 3 is not a power of two
      {Op::aligned_alloc, 512, 256, 0, 0, "aa", ""},
      {Op::valloc, 300, 0, 0, 0, "v", ""},
      {Op::pvalloc, 5000, 0, 0, 0, "pv", ""},
      {Op::free, 0, 0, 0, 0, "", "p2"},
      {Op::free, 0, 0, 0, 0, "", "c"},
      {Op::free, 0, 0, 0, 0, "", "ra2"},
      {Op::free, 0, 0, 0, 0, "", "m"},
      {Op::free, 0, 0, 0, 0, "", "pm"},
      {Op::free, 0, 0, 0, 0, "", "aa"},
      {Op::free, 0, 0, 0, 0, "", "v"},
      {Op::free, 0, 0, 0, 0, "", "pv"},
      // Each new is one event (not also the malloc it turns into).
      {Op::op_new, 24, 0, 0, 0, "n1", ""},
      {Op::op_new_array, 40, 0, 0, 0, "n2", ""},
      {Op::op_new_nothrow, 56, 0, 0, 0, "n3", ""},
      {Op::op_new_array_nothrow, 72, 0, 0, 0, "n4", ""},
      {Op::op_new_aligned, 88, 64, 0, 0, "n5", ""},
      {Op::op_new_array_aligned, 104, 128, 0, 0, "n6", ""},
      {Op::op_new_aligned_nothrow, 120, 32, 0, 0, "n7", ""},
      {Op::op_new_array_aligned_nothrow, 136, 256, 0, 0, "n8", ""},
      {Op::op_new, 8, 0, 0, 0, "n9", ""},
      {Op::op_new_array, 8, 0, 0, 0, "n10", ""},
      {Op::op_new_aligned, 8, 64, 0, 0, "n11", ""},
      {Op::op_new_array_aligned, 8, 64, 0, 0, "n12", ""},
      {Op::op_new, 8, 0, 0, 0, "n13", ""},
      {Op::op_new_array, 8, 0, 0, 0, "n14", ""},
      {Op::op_new_aligned, 8, 64, 0, 0, "n15", ""},
      {Op::op_new_array_aligned, 8, 64, 0, 0, "n16", ""},
      // Each delete by its exact operator, with the size/alignment passed.
      {Op::op_delete, 0, 0, 0, 0, "", "n1"},
      {Op::op_delete_array, 0, 0, 0, 0, "", "n2"},
      {Op::op_delete_sized, 56, 0, 0, 0, "", "n3"},
      {Op::op_delete_array_sized, 72, 0, 0, 0, "", "n4"},
      {Op::op_delete_aligned, 0, 64, 0, 0, "", "n5"},
      {Op::op_delete_array_aligned, 0, 128, 0, 0, "", "n6"},
      {Op::op_delete_sized_aligned, 120, 32, 0, 0, "", "n7"},
      {Op::op_delete_array_sized_aligned, 136, 256, 0, 0, "", "n8"},
      {Op::op_delete_nothrow, 0, 0, 0, 0, "", "n9"},
      {Op::op_delete_array_nothrow, 0, 0, 0, 0, "", "n10"},
      {Op::op_delete_aligned_nothrow, 0, 64, 0, 0, "", "n11"},
      {Op::op_delete_array_aligned_nothrow, 0, 64, 0, 0, "", "n12"},
      {Op::op_delete, 0, 0, 0, 0, "", "n13"},
      {Op::op_delete_array, 0, 0, 0, 0, "", "n14"},
      {Op::op_delete_aligned, 0, 64, 0, 0, "", "n15"},
      {Op::op_delete_array_aligned, 0, 64, 0, 0, "", "n16"},
      {Op::op_new_nothrow, kHuge, 0, 0, kNullFailed, "", ""},
      // The throwing form fails too: recorded, then std::bad_alloc is thrown.
      {Op::op_new, kHuge, 0, 0, kNullFailed, "", ""},
  };
}

// `mid` without the trailing exception malloc + free (returned in `tail`).
std::vector<Event> strip_exception(const std::vector<Event>& mid, std::vector<Event>* tail) {
  std::vector<Event> calls = mid;
  size_t n = calls.size();
  if (n >= 2 && calls[n - 2].op == Op::malloc && calls[n - 1].op == Op::free && calls[n - 1].old == calls[n - 2].id &&
      calls[n - 2].size != kHuge) {
    if (tail) tail->assign(calls.end() - 2, calls.end());
    calls.resize(n - 2);
  }
  return calls;
}

// The whole list, exactly.
TEST(CaptureApi, EveryCallExactlyInOrder) {
  const ApiCapture& c = api_capture();
  EXPECT_EQ(c.result.exit_code, 0) << "victim_cpp api exits 1 when operator new(SIZE_MAX/2) did not throw";
  EXPECT_TRUE(c.result.failed.empty()) << failed_list(c.result);
  ASSERT_TRUE(c.ok);
  const TraceResult& t = c.result.traces[0];
  EXPECT_EQ(t.report.unknown_frees, 0u);
  EXPECT_EQ(t.report.unknown_reallocs, 0u);
  EXPECT_EQ(t.report.reused_live, 0u);
  EXPECT_EQ(t.report.threads, 1u);
  expect_sequence(strip_exception(c.mid, nullptr), api_sequence());
  expect_trace_ok(t.path);
}

// Regression (was a bug): glibc's reallocarray() calls realloc() through
// the PLT, so the shim records the inner realloc as a call of its own. The
// normaliser then sees realloc(NULL/unknown, 30) + reallocarray(...) for one
// call: an extra object, an "unknown realloc" (the outer begin record already
// took the old object) and an allocation "at a still-live address". One call
// must be one event: reallocarray(NULL, 5, 6) then reallocarray(ra, 7, 6).
TEST(CaptureApi, ReallocarrayIsOneEvent) {
  const ApiCapture& c = api_capture();
  ASSERT_TRUE(c.ok);
  std::vector<Event> got;
  for (const Event& e : c.mid)
    if (e.op == Op::reallocarray) got.push_back(e);
  expect_sequence(got, {
                           {Op::reallocarray, 6, 0, 5, 0, "ra", ""},
                           {Op::reallocarray, 6, 0, 7, 0, "ra2", "ra"},
                       });
  EXPECT_EQ(c.result.traces[0].report.unknown_reallocs, 0u);
  EXPECT_EQ(c.result.traces[0].report.reused_live, 0u);
}

// Regression (was a bug, capture/shim/hooks.h hook_new): when the
// throwing operator new fails, new_emulated() throws std::bad_alloc before
// hook_new() reaches emit(), so the failed call is missing from the trace
// (the nothrow form's failure is recorded). It must be recorded as
// new(SIZE_MAX/2) with flags null|failed, after new_nothrow's failure.
TEST(CaptureApi, FailedNewIsRecorded) {
  const ApiCapture& c = api_capture();
  EXPECT_EQ(c.result.exit_code, 0) << "operator new(SIZE_MAX/2) did not throw";
  ASSERT_TRUE(c.ok);
  std::vector<Event> got;
  for (const Event& e : c.mid)
    if (e.size == kHuge) got.push_back(e);
  expect_sequence(got, {
                           {Op::op_new_nothrow, kHuge, 0, 0, kNullFailed, "", ""},
                           {Op::op_new, kHuge, 0, 0, kNullFailed, "", ""},
                       });
}

// libstdc++ allocates the std::bad_alloc with malloc (__cxa_allocate_exception)
// and frees it at the end of the catch block: the last two calls.
TEST(CaptureApi, ExceptionAllocation) {
  const ApiCapture& c = api_capture();
  ASSERT_TRUE(c.ok);
  std::vector<Event> tail;
  strip_exception(c.mid, &tail);
  ASSERT_EQ(tail.size(), 2u) << "no exception malloc + free at the end:\n" << describe(c.mid);
  EXPECT_GE(tail[0].size, sizeof(std::bad_alloc));
  EXPECT_LE(tail[0].size, 1024u);
  EXPECT_EQ(tail[0].flags, 0u);
  EXPECT_NE(tail[0].id, 0u);
  EXPECT_EQ(tail[1].old, tail[0].id);
}

TEST(Capture, ThreadsCrossThreadFrees) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_cpp"), "threads", "2", "2", "5000"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  const TraceResult& t = r.traces[0];
  EXPECT_GE(t.report.threads, 5u);
  EXPECT_EQ(t.report.holes, 0u);
  EXPECT_EQ(t.report.unfinished_reallocs, 0u);
  std::vector<Event> evs = read_events(t.path);
  auto mid = between_markers(evs, false);
  ASSERT_TRUE(mid);

  std::unordered_map<uint64_t, uint32_t> owner;  // object -> allocating thread
  std::unordered_map<uint64_t, int> freed;
  std::set<uint32_t> threads;
  uint64_t mallocs = 0, frees = 0, cross = 0, other_mallocs = 0;
  for (const Event& e : *mid) {
    threads.insert(e.thread);
    if (e.op == Op::malloc) {
      if (e.size >= 16 && e.size <= 79 && e.flags == 0 && e.id) {
        ++mallocs;
        owner[e.id] = e.thread;
      } else {
        ++other_mallocs;
      }
    } else if (e.op == Op::free && e.old && owner.count(e.old)) {
      ++frees;
      if (++freed[e.old] > 1) ADD_FAILURE() << "object freed twice: " << describe(e);
      if (owner[e.old] != e.thread) ++cross;
    }
  }
  EXPECT_EQ(mallocs, 10000u);
  EXPECT_EQ(other_mallocs, 0u) << "mallocs between the markers that the victim did not make";
  EXPECT_EQ(frees, 10000u);
  EXPECT_EQ(freed.size(), owner.size()) << "some objects were never freed";
  EXPECT_GT(cross, 0u) << "no object was freed by a thread other than its allocator";
  EXPECT_GE(threads.size(), 5u);
  // Per allocating thread: 5000 objects each from the two producers.
  std::map<uint32_t, uint64_t> per_thread;
  for (const auto& [id, th] : owner) ++per_thread[th];
  EXPECT_EQ(per_thread.size(), 2u);
  for (const auto& [th, n] : per_thread) EXPECT_EQ(n, 5000u) << "thread " << th;
  expect_trace_ok(t.path);

  auto rd = TraceReader::open(t.path);
  heaplab::analysis::TraceStats st = heaplab::analysis::compute_stats(*rd);
  EXPECT_GE(st.threads, 5u);
  EXPECT_GE(st.objects_freed_by_other_thread, cross);
}

// No record read after later ones (normalise.h, NormaliseReport::late),
// where the shim publishes a record in one restartable sequence with its
// TSC stamp (glibc registered rseq areas). Without, a thread preempted
// between the two for longer than the live reader's 20 ms margin can make
// one: only counted, then (3 in 90 runs of two of these tests, three copies
// at once on two cores).
void expect_none_late(const heaplab::normalise::NormaliseReport& rep) {
  if (rep.clock == "tsc" && heaplab::shim::find_rseq_cs_offset() != 0)
    EXPECT_EQ(rep.late, 0u);
  else if (rep.late)
    std::printf("(%llu records read late, without rseq)\n", static_cast<unsigned long long>(rep.late));
}

// The shim stamps a record once it has its place: after a block switch
// (the block's own clock pair is taken as it starts), with the switch's cost
// recorded first, so that a live reader that polled meanwhile (the thread
// taken for caught up, or not numbered yet) never finds a record stamped
// before its poll written after it. Every full block appended to .blocks
// (the raw files kept: no reader consumes, so every full block goes there)
// opens with a kRawOverhead record, and no record in it is stamped before
// the block started. (Stamped as the call came in, the block's first call
// was stamped before the block: capture tests run three copies at once on
// two cores gave frees the wrong object.)
TEST(Capture, RecordsAreStampedAfterTheirBlockStarts) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("churn"), "2", "100000"});
  opt.keep_raw = true;
  CaptureResult r = heaplab::launch::run_capture(opt);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_TRUE(r.failed.empty()) << failed_list(r);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(r.raw_dir))
    if (e.path().extension() == ".blocks") files.push_back(e.path().string());
  ASSERT_EQ(files.size(), 1u);
  std::ifstream in(files[0], std::ios::binary);
  std::vector<char> block(heaplab::raw::kBlockSize);
  uint64_t blocks = 0, records = 0;
  while (in.read(block.data(), std::streamsize(block.size()))) {
    heaplab::raw::BlockHeader h;
    std::memcpy(&h, block.data(), sizeof h);
    ASSERT_EQ(h.magic, heaplab::raw::kBlockMagic) << "block " << blocks;
    const auto* rec = reinterpret_cast<const heaplab::raw::Record*>(block.data() + heaplab::raw::kBlockHeaderSize);
    EXPECT_EQ(heaplab::raw::record_op(rec[0].head), uint32_t(heaplab::raw::kRawOverhead))
        << "block " << blocks << " (thread " << h.thread << ", its block " << h.thread_block_seq << ")";
    for (uint64_t i = 0; i < heaplab::raw::kRecordsPerBlock; ++i) {
      ASSERT_NE(rec[i].head, 0u) << "block " << blocks << " record " << i;
      // (56-bit ticks: the difference taken modulo, non-negative below 2^55)
      const uint64_t since = (heaplab::raw::record_ticks(rec[i].head) - h.ticks) & heaplab::raw::kTicksMask;
      ASSERT_LT(since, uint64_t{1} << 55) << "block " << blocks << " record " << i << " stamped before its block";
      ++records;
    }
    ++blocks;
  }
  EXPECT_GT(blocks, 100u);  // (2 threads of about 300,000 records, 2,044 a block)
  EXPECT_EQ(records, blocks * heaplab::raw::kRecordsPerBlock);
}

// Normalising while the program runs gives the trace normalising afterwards
// gives, on a real multi-threaded program long enough (about 780 blocks) for
// the shim to wait for the reader (raw::live_ahead_blocks) and for blocks to be
// given back as they are consumed.
TEST(Capture, LiveNormalisingMatchesAfter) {
  auto strip = [](std::vector<Event> evs) {
    std::vector<Event> out;
    for (Event& e : evs) {
      if (e.op == Op::thread_end) continue;  // live: written when the process ended
      e.seq = e.time = 0;
      out.push_back(e);
    }
    return out;
  };
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_cpp"), "threads", "2", "2", "400000"});
  opt.keep_raw = true;  // live, the raw files left whole
  CaptureResult kept = heaplab::launch::run_capture(opt);
  ASSERT_EQ(kept.exit_code, 0);
  ASSERT_TRUE(kept.failed.empty()) << failed_list(kept);
  ASSERT_EQ(kept.traces.size(), 1u);
  std::vector<std::string> raws;
  for (const auto& e : std::filesystem::directory_iterator(kept.raw_dir))
    if (e.path().extension() == ".hlraw") raws.push_back(e.path().string());
  ASSERT_EQ(raws.size(), 1u);
  expect_none_late(kept.traces[0].report);
  heaplab::normalise::NormaliseOptions nopt;
  heaplab::normalise::normalise_file(raws[0], dir.file("after.hlt"), nopt);
  const std::vector<Event> live = strip(read_events(kept.traces[0].path));
  const std::vector<Event> after = strip(read_events(dir.file("after.hlt")));
  ASSERT_EQ(live.size(), after.size());
  for (size_t i = 0; i < live.size(); ++i)
    ASSERT_TRUE(live[i].op == after[i].op && live[i].thread == after[i].thread && live[i].id == after[i].id &&
                live[i].old == after[i].old && live[i].size == after[i].size && live[i].flags == after[i].flags)
        << "event " << i << ": live " << describe(live[i]) << ", after " << describe(after[i]);

  // Blocks consumed as the program runs: every call still there, exactly.
  TempDir dir2;
  CaptureOptions opt2 = options(dir2, {victim("victim_cpp"), "threads", "2", "2", "400000"});
  CaptureResult r = heaplab::launch::run_capture(opt2);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_TRUE(r.failed.empty()) << failed_list(r);
  for (const std::string& n : r.notes) EXPECT_EQ(n.find("could not be deleted"), std::string::npos) << n;
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_EQ(r.traces[0].report.holes, 0u);
  expect_none_late(r.traces[0].report);
  EXPECT_EQ(r.traces[0].report.reused_live, 0u);
  auto mid = between_markers(read_events(r.traces[0].path), false);
  ASSERT_TRUE(mid);
  uint64_t mallocs = 0, frees = 0;
  for (const Event& e : *mid) {
    mallocs += e.op == Op::malloc && e.size >= 16 && e.size <= 79 && e.id;
    frees += e.op == Op::free && e.old;
  }
  EXPECT_EQ(mallocs, 800000u);
  EXPECT_EQ(frees, 800000u);
  expect_trace_ok(r.traces[0].path);
}

// `churn THREADS OPS` captured live by a reader that consumes only while
// the shim holds the program back, so that the blocks waiting for it reach
// their limit; the raw files' disk use sampled every millisecond.
struct ScratchRun {
  CaptureResult result;
  uint64_t peak = 0;          // bytes, both files
  uint64_t mapping_peak = 0;  // bytes, the .hlraw file
};
ScratchRun capture_churn_consuming_late(const TempDir& dir, const std::string& threads, const std::string& ops,
                                        const std::string& waves = "1") {
  CaptureOptions opt = options(dir, {victim("churn"), threads, ops, "20000", waves});
  opt.raw_dir = dir.file("raw");
  opt.normalise.consume_late = true;
  ScratchRun run;
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done.load()) {
      uint64_t bytes = 0;
      std::error_code ec;
      for (auto it = std::filesystem::directory_iterator(opt.raw_dir, ec);
           !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
        struct stat st {};
        if (::stat(it->path().c_str(), &st) != 0) continue;
        bytes += uint64_t(st.st_blocks) * 512;
        if (it->path().extension() == ".hlraw")
          run.mapping_peak = std::max(run.mapping_peak, uint64_t(st.st_blocks) * 512);
      }
      run.peak = std::max(run.peak, bytes);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  run.result = heaplab::launch::run_capture(opt);
  done = true;
  sampler.join();
  return run;
}

void expect_whole(const CaptureResult& r, uint64_t threads) {
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  const heaplab::normalise::NormaliseReport& rep = r.traces[0].report;
  EXPECT_EQ(rep.holes, 0u);
  EXPECT_EQ(rep.blocks_missing, 0u);
  EXPECT_EQ(rep.stop_error, 0);
  EXPECT_EQ(rep.dropped_calls, 0u);
  expect_none_late(rep);
  EXPECT_EQ(rep.threads, threads);
  expect_trace_ok(r.traces[0].path);
}

// The raw file of so many segments and the header block, and a few KiB more
// that the file system may count (an ext4 extent tree's own block).
constexpr uint64_t segments_bytes(uint64_t segments) {
  return (1 + segments * heaplab::raw::kBlocksPerSegment) * heaplab::raw::kBlockSize + 16384;
}

// Scratch disk with many threads: each keeps a block of its own while it
// runs, so fewer blocks may wait for the reader
// (raw::live_ahead_blocks), and the mapping takes at most 896 slots
// (raw::live_slots_at_most). 600 threads: the raw files stay within 64 MiB
// (before, with 512 blocks waiting whatever the threads, 72 MiB), and the
// trace is whole. (So do the blocks appended before the reader opened the
// file, late on a loaded machine: raw::kLivePreReaderBlocks. Before they
// were not bounded: 65.6 MiB in one CI run under ASan.)
TEST(Capture, LiveScratchStaysBoundedWithManyThreads) {
  static_assert(heaplab::raw::live_ahead_blocks(2) == heaplab::raw::kLiveAheadBlocks);
  static_assert(heaplab::raw::live_ahead_blocks(601) == 295);
  static_assert(heaplab::raw::live_ahead_blocks(5000) == heaplab::raw::kLiveMinAheadBlocks);
  static_assert(heaplab::raw::live_slots_at_most(601) == 896);
  static_assert(heaplab::raw::live_slots_at_most(5000) == 5064);
  TempDir dir;
  const ScratchRun run = capture_churn_consuming_late(dir, "600", "1000");
  expect_whole(run.result, 601);
  EXPECT_LE(run.peak, uint64_t{64} << 20);
  EXPECT_LE(run.mapping_peak, segments_bytes(14));
  // 601 threads' blocks and 295 waiting: 14 segments (13 and a block at least).
  EXPECT_GE(run.mapping_peak, segments_bytes(13)) << "the waiting blocks did not reach their limit";
}

// More threads than the 896 slots: each still gets a block (the mapping
// takes the threads' own and 64 more), none waits for ever, and the trace
// is whole.
TEST(Capture, LiveCaptureOfMoreThreadsThanTheScratchSlots) {
  TempDir dir;
  const ScratchRun run = capture_churn_consuming_late(dir, "1000", "700");
  expect_whole(run.result, 1001);
  EXPECT_LE(run.mapping_peak, segments_bytes(17));  // at most 1,065 slots
}

// A program whose threads come and go: 8 waves of 300 threads, 2,400 in
// all. Each thread's last block is read and given back once the kernel has
// marked the thread gone (raw::BlockHeader::exit_word), and ending threads
// no longer count as running: the raw files stay within 64 MiB (before, a
// block for every thread the program ever ran: 152 MiB), and the trace is
// whole.
TEST(Capture, LiveScratchStaysBoundedWhenThreadsComeAndGo) {
  TempDir dir;
  const ScratchRun run = capture_churn_consuming_late(dir, "300", "300", "8");
  expect_whole(run.result, 2401);
  EXPECT_LE(run.peak, uint64_t{64} << 20);
  EXPECT_LE(run.mapping_peak, segments_bytes(14));
}

// Before a live reader has opened the raw file (heaplab capture looks for
// new ones every 10 ms; later on a loaded machine) the shim appends
// raw::kLivePreReaderBlocks blocks, then waits for it. Here the shim runs
// without heaplab capture, and the test plays the reader: the program
// stops at that many, and goes on once a reader has opened the file (and,
// here, closed it again: then it appends without a bound, as without a
// reader).
TEST(Capture, ShimWaitsAtTheBlocksAllowedBeforeTheLiveReaderOpens) {
  TempDir dir;
  heaplab::process::Spec spec;
  spec.argv = {victim("churn"), "1", "250000"};
  spec.env = {{"LD_PRELOAD", shim_path()}, {"HEAPLAB_CAPTURE_DIR", dir.path()}, {"HEAPLAB_CAPTURE_LIVE", "1"}};
  spec.env_own_pid = "HEAPLAB_CAPTURE_ROOT";
  spec.out = heaplab::process::Stdio::null;
  heaplab::process::Child child = heaplab::process::spawn(spec);
  const std::string path = dir.file(std::to_string(child.pid()) + ".0.hlraw");
  const auto header = [&] {
    heaplab::raw::FileHeader h{};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && ::pread(fd, &h, sizeof h, 0) != ssize_t(sizeof h)) h = {};
    if (fd >= 0) ::close(fd);
    return h;
  };
  const auto start = std::chrono::steady_clock::now();
  while (header().data_blocks < heaplab::raw::kLivePreReaderBlocks &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int status = 0;
  ASSERT_EQ(heaplab::process::wait_for(child.pid(), &status, WNOHANG), 0) << "the program did not wait";
  EXPECT_EQ(header().data_blocks, heaplab::raw::kLivePreReaderBlocks);
  EXPECT_EQ(header().reader_started, 0u);
  { heaplab::normalise::LiveRawFile reader(path, true); }
  EXPECT_EQ(heaplab::process::exit_code(child.wait()), 0);
  const heaplab::raw::FileHeader h = header();
  EXPECT_EQ(h.reader_started, 1u);
  EXPECT_GT(h.data_blocks, heaplab::raw::kLivePreReaderBlocks + 50) << "the program went on appending";
}

// Threads that come and go from the program's first moment: `churn 4 20
// 100 1500` runs 1,500 waves of 4 short threads, each wave joined before the
// next starts, the first ones before the live reader has started (it takes a
// few ms; the program runs on for longer, or all is read at the end). Each
// thread's thread_end is written once the reader finds it gone: at its first
// look for the threads that ended before it started (their exit nodes are
// linked all the same: HEAPLAB_CAPTURE_LIVE), not at the end of the trace.
// So one wave, or two where a thread_end comes a little late, is all that is
// alive at once in the trace (a replay runs as many threads at once as the
// trace has: replay/README.md). Before, the threads that had ended before
// the reader started all ended at the end (130-150 alive at once). The
// metadata says where the thread_ends were written (capture.thread_ends).
TEST(Capture, LiveThreadsThatEndBeforeTheReaderStartsEndInPlace) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("churn"), "4", "20", "100", "1500"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  const std::vector<Event> events = read_events(r.traces[0].path);
  // Worker threads alive at once: from a thread's first event to its
  // thread_end (main, thread 0, runs throughout).
  std::map<uint32_t, bool> seen;
  uint64_t alive = 0, most = 0, ends = 0;
  for (const Event& e : events) {
    if (e.thread == 0) continue;
    if (!seen[e.thread]) {
      seen[e.thread] = true;
      most = std::max(most, ++alive);
    }
    if (e.op == Op::thread_end) {
      --alive;
      ++ends;
    }
  }
  EXPECT_EQ(seen.size(), 6000u);
  EXPECT_EQ(ends, 6000u);
  EXPECT_LE(most, 8u) << "threads that had ended were written as running on";
  expect_trace_ok(r.traces[0].path);
  // The trace says so (a replay trusts its thread_ends only then); normalised
  // after the program ran, each thread_end follows the thread's last record.
  EXPECT_EQ(capture_metadata(r.traces[0].path)["thread_ends"], "found_gone");
  TempDir after_dir;
  CaptureOptions after = options(after_dir, {victim("churn"), "4", "20", "100", "10"});
  after.live = false;
  CaptureResult a = heaplab::launch::run_capture(after);
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(a.traces.size(), 1u);
  EXPECT_EQ(capture_metadata(a.traces[0].path)["thread_ends"], "last_record");
}

// Threads that end holding a robust mutex, with a key destructor of the
// program's after the shim's (it holds another robust mutex while it makes
// more calls than a block holds: the exit node moves to the next block with
// glibc's entry in front of it): the shim's exit node in each thread's
// robust list leaves glibc's own entries whole (every held mutex reports
// EOWNERDEAD to main: the program exits 0), the calls after the shim's
// destructor are recorded, and the reader found each thread gone (its
// thread_end comes before main's end marker, not at the process's end).
// (Where the robust list's layout is not glibc's, this fails, not skips.)
TEST(Capture, LiveThreadsEndingWithRobustMutexesHeld) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "robust", "8"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  ASSERT_EQ(r.exit_code, 0) << "a mutex held by an ended thread did not report EOWNERDEAD";
  ASSERT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  auto mid = between_markers(read_events(r.traces[0].path), false);  // (the threads' calls too)
  ASSERT_TRUE(mid);
  uint64_t pairs = 0, after = 0, ends = 0;
  for (const Event& e : *mid) {
    pairs += e.op == Op::malloc && e.size == 48 && e.id;
    after += e.op == Op::malloc && e.size == 40 && e.id;
    ends += e.op == Op::thread_end;
  }
  EXPECT_EQ(pairs, 800000u);
  EXPECT_EQ(after, 8u * 2100);
  EXPECT_EQ(ends, 8u) << "threads not found gone while the program ran";
  EXPECT_EQ(r.traces[0].report.holes, 0u);
  expect_trace_ok(r.traces[0].path);
}

// A followed child whose main thread calls pthread_exit runs on: its image
// has not ended while another thread of it runs (its trace is whole).
TEST(Capture, LiveChildWhoseMainThreadExits) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "mainexit", "1000000"});
  opt.follow_fork = true;
  CaptureResult r = heaplab::launch::run_capture(opt);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 2u);
  auto mid = between_markers(read_events(r.traces[1].path), true);
  ASSERT_TRUE(mid);
  uint64_t mallocs = 0, frees = 0;
  for (const Event& e : *mid) {
    mallocs += e.op == Op::malloc && e.size == 48 && e.id;
    frees += e.op == Op::free && e.old;
  }
  EXPECT_EQ(mallocs, 1000000u);
  EXPECT_EQ(frees, 1000000u);
}

TEST(Capture, ForkWithoutFollow) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "fork"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  std::vector<Event> evs = read_events(r.traces[0].path);
  auto mid = between_markers(evs, false);
  ASSERT_TRUE(mid);
  expect_sequence(*mid, {
                            {Op::malloc, 111, 0, 0, 0, "p", ""},
                            {Op::malloc, 333, 0, 0, 0, "r", ""},
                            {Op::free, 0, 0, 0, 0, "", "r"},
                            {Op::free, 0, 0, 0, 0, "", "p"},
                        });
  EXPECT_EQ(r.traces[0].report.unknown_frees, 0u);
  // Nothing of the child's: no malloc(222) anywhere.
  for (const Event& e : evs) EXPECT_FALSE(e.op == Op::malloc && e.size == 222) << describe(e);
  expect_trace_ok(r.traces[0].path);
  // The child is named as not followed: a copy of the victim.
  ASSERT_EQ(r.unfollowed.size(), 1u);
  EXPECT_EQ(r.unfollowed[0].kind, "fork");
  EXPECT_NE(r.unfollowed[0].pid, r.pid);
  EXPECT_EQ(r.unfollowed[0].ppid, r.pid);
  EXPECT_EQ(r.unfollowed[0].exe, fs::canonical(victim("victim_c")).string());
  EXPECT_EQ(r.unfollowed[0].command_line, victim("victim_c") + " fork");
  EXPECT_NE(heaplab::launch::summary(r, opt).find(
                "heaplab capture: 1 other process was not followed (a copy of victim_c): its heap calls are not in any "
                "trace; --follow records them\n"),
            std::string::npos)
      << heaplab::launch::summary(r, opt);
  EXPECT_FALSE(fs::exists(opt.raw_dir + "/unfollowed"));  // removed with the raw files
}

// A child forked before the parent's first heap call (the shim starts in
// its constructor, not at the first call): followed, every call of it
// recorded. (The issue's example: 100,000 calls lost without a word.)
TEST(Capture, ForkBeforeTheFirstHeapCallIsFollowed) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "forkfirst", "100000"});
  opt.follow_fork = true;
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 2u);
  const TraceResult& child = r.traces[1];
  EXPECT_NE(child.pid, r.traces[0].pid);
  EXPECT_EQ(child.report.holes, 0u);
  EXPECT_EQ(child.report.dropped_calls, 0u);
  uint64_t mallocs = 0, frees = 0;
  for (const Event& e : read_events(child.path)) {
    mallocs += e.op == Op::malloc && e.size == 32;
    frees += e.op == Op::free && e.old != 0;
  }
  EXPECT_GE(mallocs, 100000u);
  EXPECT_GE(frees, 100000u);
  EXPECT_LE(mallocs, 100000u + 64) << "libc's own calls are a few at most";
}

// A child made by _Fork (no atfork handlers run) is followed as one made
// by fork, and the parent's trace keeps only the parent's calls (before,
// the child's calls were lost without a word, and the child wrote into its
// parent's blocks).
// A clone(3) child on a 4 KiB stack above a guard page (runc's nsexec):
// the shim's child handler runs on a stack of its own, so the child runs
// as it would without the shim, followed or not.
TEST(Capture, CloneOnATinyStack) {
  for (const bool follow : {false, true}) {
    SCOPED_TRACE(follow ? "followed" : "not followed");
    TempDir dir;
    CaptureOptions opt = options(dir, {victim("victim_c"), "clonetiny"});
    opt.follow_fork = follow;
    const CaptureResult r = heaplab::launch::run_capture(opt);
    EXPECT_EQ(r.exit_code, 0) << "the child did not exit 7";
    EXPECT_TRUE(r.failed.empty()) << failed_list(r);
    EXPECT_EQ(r.traces.size(), follow ? 2u : 1u);
  }
}

// A thread made by syscall(SYS_clone) with a stack of its own: its child
// resumes inside syscall(2), so the shim's entry must leave no frame of its
// own there (it jumps to glibc's).
// The shim's notes of images it did not follow: a line cut short by a full
// disk (the shim counted that image in the spare headers instead) is not
// read, nor joined to the line after it.
TEST(Capture, UnfollowedNotesCutShortAreSkipped) {
  TempDir dir;
  std::ofstream(dir.file("unfollowed"), std::ios::binary)
      << "\nfork\t11\t10\t/bin/a\ta x\t.\n"
      << "\nexec\t12\t10\t/usr/b"  // cut
      << "\nexec\t13\t10\t/bin/c\tc  \t.\n"
      << "\nfork\t14\t13\t.\n"  // past the first MiB: no program named
      << "\nfork\t15\t13";      // cut
  const std::vector<heaplab::launch::UnfollowedImage> u = heaplab::launch::read_unfollowed(dir.path());
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].kind, "fork");
  EXPECT_EQ(u[0].pid, 11u);
  EXPECT_EQ(u[0].exe, "/bin/a");
  EXPECT_EQ(u[0].command_line, "a x");
  EXPECT_EQ(u[1].kind, "exec");
  EXPECT_EQ(u[1].pid, 13u);
  EXPECT_EQ(u[1].ppid, 10u);
  EXPECT_EQ(u[1].command_line, "c");
  EXPECT_EQ(u[2].pid, 14u);
  EXPECT_EQ(u[2].exe, "");
}

TEST(Capture, RawCloneThreadRunsAsWithoutTheShim) {
  TempDir dir;
  const CaptureResult r = heaplab::launch::run_capture(options(dir, {victim("victim_c"), "rawthread"}));
  EXPECT_EQ(r.exit_code, 0) << "the raw thread did not run";
  EXPECT_EQ(r.signal, 0);
}

// A process cloned with thread-local storage of its own (CLONE_SETTLS) is
// left alone: the shim's child handler would use the shim's thread state
// in that storage (it crashed the child).
TEST(Capture, CloneWithItsOwnTlsRunsAsWithoutTheShim) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "clonetls"});
  opt.follow_fork = true;
  const CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 7) << "the child did not exit 7 (128 + N: signal N)";
  EXPECT_EQ(r.traces.size(), 1u);
}

// A low limit on open files (ulimit -n 64): the spare headers' descriptor
// goes below it, and the program starts as it would.
TEST(Capture, LowDescriptorLimit) {
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  struct rlimit low = old;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  TempDir dir;
  CaptureResult r;
  try {
    r = heaplab::launch::run_capture(options(dir, {victim("victim_c"), "single"}));
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  setrlimit(RLIMIT_NOFILE, &old);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  EXPECT_EQ(r.traces.size(), 1u);
}

// Forks that bypass glibc's fork(): _Fork, syscall(SYS_fork), syscall(SYS_clone3) and clone(3)
// without CLONE_VM. The child is followed from its first call, and never
// writes into its parent's blocks.
TEST(Capture, ForksWithoutForkAreFollowed) {
  for (const char* how : {"_fork", "sysfork", "clone3", "clone", "sysclonestack"}) {
    SCOPED_TRACE(how);
    TempDir dir;
    CaptureOptions opt = options(dir, {victim("victim_c"), how, "50000"});
    opt.follow_fork = true;
    CaptureResult r = heaplab::launch::run_capture(opt);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_TRUE(r.failed.empty()) << failed_list(r);
    ASSERT_EQ(r.traces.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      SCOPED_TRACE(i == 0 ? "parent" : "child");
      const TraceResult& t = r.traces[i];
      EXPECT_EQ(t.report.holes, 0u);
      EXPECT_EQ(t.report.dropped_calls, 0u);
      EXPECT_EQ(t.report.unknown_frees, 0u);
      uint64_t mine = 0, other = 0;
      for (const Event& e : read_events(t.path)) {
        mine += e.op == Op::malloc && e.size == (i == 0 ? 24u : 32u);
        other += e.op == Op::malloc && e.size == (i == 0 ? 32u : 24u);
      }
      EXPECT_GE(mine, 50000u);
      EXPECT_LE(mine, 50000u + 64) << "libc's own calls are a few at most";
      EXPECT_LE(other, 64u);
      expect_trace_ok(t.path);
    }
    EXPECT_NE(r.traces[1].pid, r.traces[0].pid);
  }
}

TEST(Capture, ForkFollowed) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "fork"});
  opt.follow_fork = true;
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 2u);
  const TraceResult& parent = r.traces[0];
  const TraceResult& child = r.traces[1];
  EXPECT_EQ(parent.path, opt.output);
  EXPECT_NE(child.pid, parent.pid);
  EXPECT_EQ(child.exec_generation, 0u);
  EXPECT_NE(child.path, parent.path);
  EXPECT_TRUE(fs::exists(child.path));

  auto pmid = between_markers(read_events(parent.path), false);
  ASSERT_TRUE(pmid);
  expect_sequence(*pmid, {
                             {Op::malloc, 111, 0, 0, 0, "p", ""},
                             {Op::malloc, 333, 0, 0, 0, "r", ""},
                             {Op::free, 0, 0, 0, 0, "", "r"},
                             {Op::free, 0, 0, 0, 0, "", "p"},
                         });

  // The child's trace starts at the fork: everything up to its end marker.
  std::vector<Event> cevs = read_events(child.path);
  std::vector<Event> before_end;
  bool ended = false;
  for (const Event& e : cevs) {
    if (e.op == Op::malloc && e.size == kEnd) {
      ended = true;
      break;
    }
    if (!is_thread_marker(e)) before_end.push_back(e);
  }
  EXPECT_TRUE(ended) << describe(cevs);
  // free(p) of the pre-fork object is counted and skipped, not written.
  expect_sequence(before_end, {
                                  {Op::malloc, 222, 0, 0, 0, "q", ""},
                                  {Op::free, 0, 0, 0, 0, "", "q"},
                              });
  EXPECT_GE(child.report.unknown_frees, 1u);
  nlohmann::json cap = capture_metadata(child.path);
  EXPECT_EQ(cap.value("fork_child", false), true);
  EXPECT_EQ(cap.value("ppid", 0u), parent.pid);
  expect_trace_ok(parent.path);
  expect_trace_ok(child.path);
}

TEST(Capture, ExecWithoutFollow) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "exec"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_EQ(r.traces[0].exec_generation, 0u);
  // The first image ends in execl: no end marker.
  auto mid = between_markers(read_events(r.traces[0].path), false, /*need_end=*/false);
  ASSERT_TRUE(mid);
  std::vector<Event> calls;
  for (const Event& e : *mid)
    if (!is_thread_marker(e)) calls.push_back(e);
  expect_sequence(calls, {{Op::malloc, 444, 0, 0, 0, "p", ""}});
  expect_trace_ok(r.traces[0].path);
  // What it exec'd into is named: the capture did not follow it.
  ASSERT_EQ(r.unfollowed.size(), 1u);
  EXPECT_EQ(r.unfollowed[0].kind, "exec");
  EXPECT_EQ(r.unfollowed[0].pid, r.pid);
  EXPECT_EQ(r.unfollowed[0].command_line, victim("victim_c") + " single");
  const std::string exe = fs::canonical(victim("victim_c")).string();
  EXPECT_NE(heaplab::launch::summary(r, opt).find(
                "heaplab capture: victim_c exec'd " + exe + " (`" + victim("victim_c") +
                " single`), which was not followed: its heap calls are not in the trace (it holds victim_c's before "
                "the exec); --follow-exec (or --follow) records it\n"),
            std::string::npos)
      << heaplab::launch::summary(r, opt);
}

// A wrapper (a shell running the program, then exec'ing it): every image
// and process not followed is named, and with --follow each trace is named
// by its program and the one with most calls is said.
TEST(Capture, WrapperNotFollowedIsNamed) {
  TempDir dir;
  const std::string v = victim("victim_c");
  CaptureOptions opt = options(dir, {"/bin/sh", "-c", v + " single; " + v + " single; exec " + v + " single"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  const std::string text = heaplab::launch::summary(r, opt);
  EXPECT_NE(text.find("heaplab capture: sh exec'd " + fs::canonical(v).string() + " (`" + v + " single`)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("heaplab capture: 2 other processes were not followed (victim_c x2): their heap calls are not "
                      "in any trace; --follow records them\n"),
            std::string::npos)
      << text;

  // Children followed into the programs they exec'd are not named as unfollowed.
  TempDir dir3;
  opt = options(dir3, {"/bin/sh", "-c", v + " single; (" + v + " single); exec " + v + " single"});
  opt.follow_exec = true;
  r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(heaplab::launch::summary(r, opt).find("not followed"), std::string::npos)
      << heaplab::launch::summary(r, opt);

  TempDir dir2;
  opt = options(dir2, {"/bin/sh", "-c", v + " single; exec " + v + " single"});
  opt.follow_fork = opt.follow_exec = true;
  r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 3u) << failed_list(r);
  EXPECT_TRUE(r.unfollowed.empty());
  for (size_t i = 1; i < 3; ++i)
    EXPECT_EQ(fs::path(r.traces[i].path).filename().string(),
              fmt::format("out.victim_c.{}{}.hlt", r.traces[i].pid,
                          r.traces[i].exec_generation ? "-" + std::to_string(r.traces[i].exec_generation) : ""));
  EXPECT_NE(heaplab::launch::summary(r, opt).find("heaplab capture: most calls: "), std::string::npos)
      << heaplab::launch::summary(r, opt);
}

// A program linked against jemalloc runs on it unless told otherwise, and
// on glibc's malloc (not jemalloc's) under --allocator glibc; what it
// brings and what it calls of jemalloc's own is said and kept in the
// trace's metadata.
TEST(Capture, ProgramLinkedAgainstAnAllocator) {
#ifndef HEAPLAB_TEST_HAVE_JEMALLOC_VICTIM
  GTEST_SKIP() << "no libjemalloc-dev: victim_jemalloc not built";
#else
  for (const std::string alloc : {"", "glibc"}) {
    TempDir dir;
    const std::string report = dir.file("jemalloc-allocated");
    CaptureOptions opt = options(dir, {victim("victim_jemalloc"), report});
    opt.allocator = alloc;
    CaptureResult r = heaplab::launch::run_capture(opt);
    ASSERT_EQ(r.exit_code, 0) << alloc;
    std::ifstream in(report);
    uint64_t allocated = 0;
    in >> allocated;
    const nlohmann::json cap = capture_metadata(r.traces.at(0).path);
    EXPECT_EQ(cap["program_allocator"]["name"], "jemalloc");
    EXPECT_EQ(cap["program_allocator"]["library"], "libjemalloc.so.2");
    EXPECT_EQ(cap["program_allocator"]["own_api"], nlohmann::json::array({"mallctl"}));
    const std::string text = heaplab::launch::summary(r, opt);
    if (alloc.empty()) {
      EXPECT_GE(allocated, 16u << 20);  // the 16 MiB it keeps, on jemalloc
      EXPECT_EQ(cap["allocator"], "jemalloc");
      EXPECT_NE(text.find("heaplab capture: victim_jemalloc is linked against jemalloc (libjemalloc.so.2): it ran, and "
                          "was captured, on jemalloc; --allocator glibc runs it on glibc's malloc\n"),
                std::string::npos)
          << text;
    } else {
      EXPECT_LT(allocated, 1u << 20);  // jemalloc served none of them
      EXPECT_EQ(cap["allocator"], "glibc");
      EXPECT_NE(text.find("--allocator glibc ran it on glibc's malloc (heaplab's forwarder, libheaplab_glibc.so, "
                          "preloaded); its calls of jemalloc's own statistics functions (mallctl) still reach it\n"),
                std::string::npos)
          << text;
    }
    // Its 16 blocks of 1 MiB, recorded either way.
    size_t mib = 0;
    for (const Event& e : read_events(r.traces[0].path)) mib += e.op == Op::malloc && e.size == (1u << 20);
    EXPECT_EQ(mib, 16u) << alloc;
  }
  // A program that hands blocks to jemalloc's own functions cannot run on
  // another allocator: refused before it runs, one line; on jemalloc it runs.
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_jemalloc_blocks")});
  opt.allocator = "glibc";
  try {
    heaplab::launch::run_capture(opt);
    ADD_FAILURE() << "not refused";
  } catch (const heaplab::launch::LaunchError& e) {
    EXPECT_EQ(std::string(e.what()),
              "'" + victim("victim_jemalloc_blocks") +
                  "' calls jemalloc's own dallocx, mallocx, which take or return heap blocks: on another allocator "
                  "those would mix two allocators' blocks; capture it without --allocator (on jemalloc)");
  }
  opt = options(dir, {victim("victim_jemalloc_blocks")});
  EXPECT_EQ(heaplab::launch::run_capture(opt).exit_code, 0);
  // Behind a wrapper it cannot be refused before it runs: it is warned about.
  {
    TempDir wdir;
    opt = options(wdir, {"/bin/sh", "-c", "exec " + victim("victim_jemalloc_blocks")});
    opt.allocator = "glibc";
    opt.follow_exec = true;
    CaptureResult r = heaplab::launch::run_capture(opt);
    ASSERT_EQ(r.traces.size(), 2u);
    EXPECT_NE(heaplab::launch::summary(r, opt).find(
                  "heaplab capture: warning: " + r.traces[1].path +
                  " (victim_jemalloc_blocks) calls jemalloc's own dallocx, mallocx, which take or return heap blocks, "
                  "yet another allocator answered its malloc"),
              std::string::npos)
        << heaplab::launch::summary(r, opt);
  }
  // Behind a wrapper, followed: each image labelled by what answered it.
  for (const std::string alloc : {"", "glibc"}) {
    TempDir wdir;
    const std::string report = wdir.file("jemalloc-allocated");
    opt = options(wdir, {"/bin/sh", "-c", "exec " + victim("victim_jemalloc") + " " + report});
    opt.allocator = alloc;
    opt.follow_exec = true;
    CaptureResult r = heaplab::launch::run_capture(opt);
    ASSERT_EQ(r.traces.size(), 2u) << alloc;
    std::ifstream in(report);
    uint64_t allocated = 0;
    in >> allocated;
    EXPECT_EQ(capture_metadata(r.traces[0].path)["allocator"], "glibc");  // sh
    EXPECT_FALSE(capture_metadata(r.traces[0].path).contains("program_allocator"));
    const nlohmann::json exec = capture_metadata(r.traces[1].path);
    EXPECT_EQ(exec["program_allocator"]["name"], "jemalloc");
    EXPECT_EQ(exec["allocator"], alloc.empty() ? "jemalloc" : "glibc");
    EXPECT_EQ(allocated >= (16u << 20), alloc.empty()) << allocated;
  }
#endif
}

TEST(Capture, ExecFollowed) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "exec"});
  opt.follow_exec = true;
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 2u);
  EXPECT_EQ(r.traces[0].exec_generation, 0u);
  EXPECT_EQ(r.traces[0].path, opt.output);
  EXPECT_EQ(r.traces[1].exec_generation, 1u);
  EXPECT_EQ(r.traces[1].pid, r.traces[0].pid);
  ASSERT_GE(r.traces[1].command_line.size(), 2u);
  EXPECT_EQ(r.traces[1].command_line[1], "single");

  auto first = between_markers(read_events(r.traces[0].path), false, false);
  ASSERT_TRUE(first);
  std::vector<Event> calls;
  for (const Event& e : *first)
    if (!is_thread_marker(e)) calls.push_back(e);
  expect_sequence(calls, {{Op::malloc, 444, 0, 0, 0, "p", ""}});

  auto second = between_markers(read_events(r.traces[1].path), false);
  ASSERT_TRUE(second);
  expect_sequence(*second, single_sequence());
  EXPECT_EQ(capture_metadata(r.traces[1].path).value("exec_generation", 99u), 1u);
  expect_trace_ok(r.traces[0].path);
  expect_trace_ok(r.traces[1].path);
}

// With children followed, heaplab waits for descendants that outlive the
// program (here a background job started by a shell that exits at once).
TEST(Capture, FollowWaitsForDescendantsThatOutliveTheProgram) {
  TempDir dir;
  CaptureOptions opt =
      options(dir, {"/bin/sh", "-c", "( sleep 0.3; exec " + victim("victim_c") + " single ) & exit 0"});
  opt.follow_fork = opt.follow_exec = true;
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.descendants_running);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  int found = 0;
  for (const auto& t : r.traces) {
    if (t.command_line.size() < 2 || t.command_line[1] != "single") continue;
    ++found;
    auto calls = between_markers(read_events(t.path), false);
    ASSERT_TRUE(calls);
    expect_sequence(*calls, single_sequence());
    expect_trace_ok(t.path);
  }
  EXPECT_EQ(found, 1);
}

TEST(Capture, SpawnFollowExec) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "spawn"});
  opt.follow_exec = true;  // and not follow_fork: the child is captured from its exec on
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 2u);
  const TraceResult& parent = r.traces[0];
  const TraceResult& child = r.traces[1];
  EXPECT_EQ(parent.path, opt.output);
  EXPECT_NE(child.pid, parent.pid);
  EXPECT_EQ(child.exec_generation, 0u);

  auto pmid = between_markers(read_events(parent.path), false);
  ASSERT_TRUE(pmid);
  expect_sequence(*pmid, {
                             {Op::malloc, 444, 0, 0, 0, "p", ""},
                             {Op::free, 0, 0, 0, 0, "", "p"},
                         });
  auto cmid = between_markers(read_events(child.path), false);
  ASSERT_TRUE(cmid);
  expect_sequence(*cmid, single_sequence());
  expect_trace_ok(parent.path);
  expect_trace_ok(child.path);
}

TEST(Capture, SpawnWithoutFollow) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "spawn"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  auto pmid = between_markers(read_events(r.traces[0].path), false);
  ASSERT_TRUE(pmid);
  expect_sequence(*pmid, {
                             {Op::malloc, 444, 0, 0, 0, "p", ""},
                             {Op::free, 0, 0, 0, 0, "", "p"},
                         });
}

// ---------------------------------------------------------------------------

struct CrashCase {
  const char* mode;
  int signal;
};

class CaptureCrash : public ::testing::TestWithParam<CrashCase> {};

TEST_P(CaptureCrash, TraceHoldsEveryEventBeforeDeath) {
  // No core files (a core_pattern handler can be slow).
  rlimit no_core{0, 0};
  rlimit old{};
  getrlimit(RLIMIT_CORE, &old);
  no_core.rlim_max = old.rlim_max;
  setrlimit(RLIMIT_CORE, &no_core);

  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "crash", GetParam().mode, "5000"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  setrlimit(RLIMIT_CORE, &old);
  EXPECT_EQ(r.signal, GetParam().signal);
  EXPECT_EQ(r.exit_code, 128 + GetParam().signal);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  const TraceResult& t = r.traces[0];
  EXPECT_FALSE(t.report.clean_exit);
  EXPECT_EQ(t.report.holes, 0u);
  EXPECT_EQ(t.report.blocks_missing, 0u);

  auto mid = between_markers(read_events(t.path), false, /*need_end=*/false);
  ASSERT_TRUE(mid);
  std::vector<Event> calls;
  for (const Event& e : *mid)
    if (!is_thread_marker(e)) calls.push_back(e);
  ASSERT_EQ(calls.size(), 5000u) << describe(calls, 20) << "...\n"
                                 << describe(std::vector<Event>(calls.end() - std::min<size_t>(calls.size(), 10),
                                                                calls.end()));
  std::set<uint64_t> ids;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Event& e = calls[i];
    if (e.op != Op::malloc || e.size != (i % 100) + 1 || e.flags != 0 || e.id == 0 || !ids.insert(e.id).second) {
      ADD_FAILURE() << "call " << i << ": " << describe(e) << ", want malloc size=" << (i % 100) + 1;
      break;
    }
  }
  nlohmann::json cap = capture_metadata(t.path);
  EXPECT_EQ(cap.value("signal", 0), GetParam().signal);
  EXPECT_EQ(cap.value("exit_code", 0), 128 + GetParam().signal);
  expect_trace_ok(t.path);
}

INSTANTIATE_TEST_SUITE_P(Modes, CaptureCrash,
                         ::testing::Values(CrashCase{"kill", 9}, CrashCase{"segv", 11}, CrashCase{"abort", 6}),
                         [](const ::testing::TestParamInfo<CrashCase>& p) { return std::string(p.param.mode); });

// ---------------------------------------------------------------------------

// A timer signal handler mallocs and frees while the main thread does too:
// every record of both must be in the trace, in a consistent order.
// Regression (was a bug, fixed by sink_file.cpp switch_block()), seen
// in about 1 run in 40 to 80: when the signal lands between the main
// thread's slot reservation (xadd) and its record write, and the handler's
// own records overflow the block, the handler's emit_slow() -> next_block()
// appends the block to .blocks with the interrupted slot still zero and
// clears the block for reuse; the interrupted record is then written into
// the recycled block, where the thread's later records overwrite it. The
// record is lost: a `lost` marker (holes == 1) if the slot was not the
// block's last, else nothing at all (the zero slot looks like the unused
// tail). Seen in a kept raw file: block 87 ends with malloc(32)=X at slot
// 2042, slot 2043 (the free(X)) is empty, block 88 starts with the handler's
// malloc(48)/free(48) then malloc(32)=X again (reused_live). This test
// asserts that no record is lost, so it fails whenever that happens.
// Signals heaplab was started with ignored (nohup) stay ignored for the
// program, as they would without heaplab; the others are the program's to
// take (found by review: the launcher's forwarding handlers once reset
// SIGHUP and SIGTERM to their defaults).
TEST(Capture, SignalsIgnoredAtStartStayIgnoredForTheProgram) {
  TempDir dir;
  const std::string status = dir.file("status");
  struct sigaction ign {
  }, old_hup{}, old_term{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &ign, &old_hup);
  sigaction(SIGTERM, &ign, &old_term);
  CaptureOptions opt = options(dir, {"/bin/sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status > " + status});
  CaptureResult r = heaplab::launch::run_capture(opt);
  sigaction(SIGHUP, &old_hup, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  EXPECT_EQ(r.exit_code, 0);
  std::ifstream f(status);
  unsigned long blk = 0, ign_mask = 0;
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("SigBlk:", 0) == 0) blk = std::stoul(line.substr(7), nullptr, 16);
    if (line.rfind("SigIgn:", 0) == 0) ign_mask = std::stoul(line.substr(7), nullptr, 16);
  }
  const auto bit = [](int sig) { return 1ul << (sig - 1); };
  EXPECT_TRUE(ign_mask & bit(SIGHUP)) << std::hex << ign_mask;
  EXPECT_TRUE(ign_mask & bit(SIGTERM)) << std::hex << ign_mask;
  EXPECT_FALSE(ign_mask & bit(SIGINT)) << std::hex << ign_mask;  // Ctrl-C is the program's
  EXPECT_FALSE(blk & (bit(SIGTERM) | bit(SIGHUP))) << std::hex << blk;
}

// A signal handler that allocates while the shim is still starting up (the
// thread's first heap call has not been recorded yet): its calls must be in
// the trace. Before, they came from the shim's start-up arena and were never
// recorded, with nothing counted lost. signal_during_start.so, preloaded
// after the shim, raises SIGUSR1 from the getenv the shim calls while it
// starts; the handler mallocs 7001, 7002 and 7003 bytes and frees them.
// Sets an environment variable for the test's scope (the launcher passes
// the environment on to the program).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(Capture, SignalDuringShimStartUp) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  CaptureResult r;
  {
    ScopedEnv preload("LD_PRELOAD", binary_dir() + "/capture/testprogs/libsignal_during_start.so");
    r = heaplab::launch::run_capture(opt);
  }
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_EQ(r.traces[0].report.unknown_frees, 0u);
  EXPECT_EQ(r.traces[0].report.holes, 0u);
  std::vector<Event> evs = read_events(r.traces[0].path);
  for (uint64_t size : {7001u, 7002u, 7003u}) {
    std::vector<uint64_t> ids;
    for (const Event& e : evs)
      if (e.op == Op::malloc && e.size == size) ids.push_back(e.id);
    ASSERT_EQ(ids.size(), 1u) << "malloc(" << size << ") made in the handler";
    EXPECT_EQ(
        std::count_if(evs.begin(), evs.end(), [&](const Event& e) { return e.op == Op::free && e.old == ids[0]; }), 1)
        << "free of malloc(" << size << ")";
  }
  // The program's own calls are all there as well.
  auto mid = between_markers(evs, false);
  ASSERT_TRUE(mid);
  expect_sequence(*mid, single_sequence());
  expect_trace_ok(r.traces[0].path);
}

// A fault while the shim starts, under the program's SIGSEGV handler (which
// jumps back): taken by the handler as without heaplab. (Were the fault's
// signal held with the others, the kernel would kill the program.)
TEST(Capture, FaultHandledDuringShimStartUp) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  CaptureResult r;
  {
    ScopedEnv preload("LD_PRELOAD", binary_dir() + "/capture/testprogs/libsignal_during_start.so");
    ScopedEnv fault("SIGNAL_DURING_START_FAULT", "1");
    r = heaplab::launch::run_capture(opt);
  }
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  std::vector<Event> evs = read_events(r.traces[0].path);
  auto mid = between_markers(evs, false);
  ASSERT_TRUE(mid);
  expect_sequence(*mid, single_sequence());
}

namespace {
// `victim_c signal N` captured with `opt`: every call of its loop (32
// bytes) and of its timer signal handler (48 bytes) is in the trace.
void expect_every_signal_call(const TempDir& dir, const CaptureOptions& opt) {
  const std::string out = dir.file("stdout.txt");
  CaptureResult r = run_with_stdout(opt, out);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  const TraceResult& t = r.traces[0];
  EXPECT_EQ(t.report.unknown_frees, 0u);
  EXPECT_EQ(t.report.holes, 0u);
  EXPECT_EQ(t.report.reused_live, 0u);

  long loop = -1, handler = -1;
  {
    std::string text = heaplab::trace::testutil::read_file(out);
    std::istringstream in(text);
    in >> loop >> handler;
    ASSERT_TRUE(in) << "victim_c signal printed '" << text << "'";
  }
  EXPECT_GE(loop, 200000);
  EXPECT_GE(handler, 100);

  auto mid = between_markers(read_events(t.path), false);
  ASSERT_TRUE(mid);
  std::unordered_map<uint64_t, uint64_t> size_of;  // live id -> size
  std::map<uint64_t, uint64_t> mallocs, frees;     // by size
  for (const Event& e : *mid) {
    if (e.op == Op::malloc) {
      ASSERT_NE(e.id, 0u) << describe(e);
      ASSERT_TRUE(e.size == 32 || e.size == 48) << describe(e);
      ++mallocs[e.size];
      size_of[e.id] = e.size;
    } else if (e.op == Op::free) {
      auto it = size_of.find(e.old);
      ASSERT_TRUE(it != size_of.end()) << "free of an object that is not live: " << describe(e);
      ++frees[it->second];
      size_of.erase(it);
    } else {
      ADD_FAILURE() << "unexpected event between the markers: " << describe(e);
    }
  }
  EXPECT_TRUE(size_of.empty()) << size_of.size() << " objects never freed";
  EXPECT_EQ(mallocs[32], uint64_t(loop));
  EXPECT_EQ(frees[32], uint64_t(loop));
  EXPECT_EQ(mallocs[48], uint64_t(handler));
  EXPECT_EQ(frees[48], uint64_t(handler));
  expect_trace_ok(t.path);
}
}  // namespace

TEST(Capture, SignalHandlerAllocations) {
  TempDir dir;
  expect_every_signal_call(dir, options(dir, {victim("victim_c"), "signal", "200000"}));
}

// ---------------------------------------------------------------------------

class CaptureAllocator : public ::testing::TestWithParam<const char*> {};

TEST_P(CaptureAllocator, SingleSequence) {
  std::string err;
  auto lib = heaplab::allocators::resolve_allocator(GetParam(), err);
  // Skip only when the library is not installed: any other resolution
  // failure is a failure (jemalloc, for one, cannot be dlopen'ed into a
  // running process, static TLS, but preloads fine).
  if (!lib && err.find("cannot open shared object file") != std::string::npos) GTEST_SKIP() << err;
  ASSERT_TRUE(lib) << err;
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  opt.allocator = GetParam();
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  auto mid = between_markers(read_events(r.traces[0].path), false);
  ASSERT_TRUE(mid);
  std::vector<Want> want = single_sequence();
  // realloc(D, 0): glibc frees and returns NULL; an allocator may instead
  // return a new (minimal) object.
  if (mid->size() == want.size() && (*mid)[6].op == Op::realloc && (*mid)[6].flags == 0)
    want[6] = {Op::realloc, 0, 0, 0, 0, "E", "D"};
  expect_sequence(*mid, want);
  nlohmann::json cap = capture_metadata(r.traces[0].path);
  EXPECT_EQ(cap.value("allocator", ""), lib->path);
  EXPECT_NE(cap.value("allocator", "").find(GetParam()), std::string::npos) << cap.dump();
  expect_trace_ok(r.traces[0].path);
}

INSTANTIATE_TEST_SUITE_P(Known, CaptureAllocator, ::testing::Values("jemalloc", "mimalloc", "tcmalloc"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

// ---------------------------------------------------------------------------
// The program's own memory: victim_memory maps (see there).

std::vector<std::string> memory_calls(const std::string& path) {
  auto r = TraceReader::open(path);
  std::vector<std::string> out;
  for (const heaplab::trace::MemoryEvent& m : r->read_memory_events()) {
    if (m.op == heaplab::trace::MemOp::object) continue;
    std::string line = std::string(heaplab::trace::mem_op_name(m.op)) + " r" + std::to_string(m.region);
    if (m.op != heaplab::trace::MemOp::map) line += " +" + std::to_string(m.offset);
    line += " " + std::to_string(m.length);
    if (m.op != heaplab::trace::MemOp::map)
      line += m.pages == heaplab::trace::kUnknownPages ? " ?p" : " " + std::to_string(m.pages) + "p";
    if (m.op == heaplab::trace::MemOp::remap)
      line += " -> r" + std::to_string(m.new_region) + " " + std::to_string(m.new_length);
    out.push_back(line);
  }
  return out;
}

// Resident pages recorded for the heap objects of `bytes` requested bytes.
std::vector<uint64_t> object_pages(const std::string& path, uint64_t bytes) {
  auto r = TraceReader::open(path);
  std::vector<uint64_t> out;
  for (const heaplab::trace::MemoryEvent& m : r->read_memory_events())
    if (m.op == heaplab::trace::MemOp::object && m.length == bytes) out.push_back(m.pages);
  return out;
}

// Every call, in order, with the resident pages measured before each
// release placed as a touch behind the region's previous call; the file
// mapping is not there; the break is a mapping of its own.
const std::vector<std::string> kVictimMemoryCalls = {
    "mmap r1 1048576",
    "touch r1 +0 131072 32p",  // the 64 pages written: 32 of them given back by the madvise
    "madvise_dontneed r1 +0 131072 32p",
    "touch r1 +0 1048576 32p",  // the other 32, resident when it was remapped
    "mremap r1 +0 1048576 32p -> r2 2097152",
    "munmap r2 +1048576 1048576 0p",
    "touch r2 +0 1048576 32p",
    "munmap r2 +0 1048576 32p",
    "mmap r3 65536",  // the break moved up 64 KiB ...
    "touch r3 +0 65536 16p",
    "munmap r3 +0 65536 16p",  // ... and back
    "mmap r4 524288",
    "touch r4 +0 524288 16p",  // live at exit: measured then
};

TEST(CaptureMemory, ProgramsOwnMemoryExactly) {
  TempDir dir;
  CaptureResult r = heaplab::launch::run_capture(options(dir, {victim("victim_memory"), "maps"}));
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_EQ(memory_calls(r.traces[0].path), kVictimMemoryCalls);
  // The large blocks, written in part: 25 of 256 pages (freed), 3 of 512 (live at exit).
  EXPECT_EQ(object_pages(r.traces[0].path, 1 << 20), std::vector<uint64_t>{25});
  EXPECT_EQ(object_pages(r.traces[0].path, 2 << 20), std::vector<uint64_t>{3});
  const heaplab::normalise::NormaliseReport& rep = r.traces[0].report;
  EXPECT_EQ(rep.memory_calls, 9u);  // 2 mmap, 1 madvise, 1 mremap, 3 munmap (1 of the file), 2 break moves
  EXPECT_EQ(rep.regions, 4u);
  EXPECT_EQ(rep.unknown_memory_releases, 1u);  // the file mapping's munmap
  auto reader = TraceReader::open(r.traces[0].path);
  EXPECT_EQ(reader->minor_version(), 1u);
  expect_trace_ok(r.traces[0].path);
}

TEST_P(CaptureAllocator, AllocatorsOwnMemoryIsNotRecorded) {
  std::string err;
  auto lib = heaplab::allocators::resolve_allocator(GetParam(), err);
  if (!lib && err.find("cannot open shared object file") != std::string::npos) GTEST_SKIP() << err;
  ASSERT_TRUE(lib) << err;
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_memory"), "maps"});
  opt.allocator = GetParam();
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  // The allocator maps, purges and unmaps memory of its own (tcmalloc
  // through libunwind too): none of it is the program's.
  EXPECT_EQ(memory_calls(r.traces[0].path), kVictimMemoryCalls);
  EXPECT_EQ(object_pages(r.traces[0].path, 1 << 20), std::vector<uint64_t>{25});
}

// capture --latency N: one call in N is timed inside the allocator, and
// each time is tied to its call. With N = 1, every call of the program.
TEST(CaptureMemory, LatencyOfEveryNthCallIsTiedToItsCall) {
  for (uint32_t every : {1u, 3u}) {
    SCOPED_TRACE(every);
    TempDir dir;
    CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
    opt.latency = every;
    CaptureResult r = heaplab::launch::run_capture(opt);
    EXPECT_EQ(r.exit_code, 0);
    ASSERT_EQ(r.traces.size(), 1u);
    auto reader = TraceReader::open(r.traces[0].path);
    std::vector<Event> events = read_events(r.traces[0].path);
    uint64_t calls = 0;
    for (const Event& e : events)
      if (e.op != Op::thread_start && e.op != Op::thread_end && e.op != Op::lost) ++calls;
    std::set<uint64_t> timed;
    for (const heaplab::trace::MemoryEvent& m : reader->read_memory_events()) {
      if (m.op != heaplab::trace::MemOp::latency) continue;
      ASSERT_LT(m.after, events.size());
      const Op op = events[m.after].op;
      EXPECT_TRUE(op != Op::thread_start && op != Op::thread_end && op != Op::lost) << m.after;
      EXPECT_LT(m.length, 100'000'000u);  // ns: well under 0.1 s
      EXPECT_TRUE(timed.insert(m.after).second);
    }
    // Calls of memory allocated before capture (skipped frees) are not tied to anything.
    const uint64_t skipped = r.traces[0].report.unknown_frees;
    if (every == 1) {
      EXPECT_EQ(timed.size() + skipped, r.traces[0].report.calls + skipped);
      EXPECT_EQ(timed.size(), calls);
    } else {
      EXPECT_GE(timed.size() * every + every, calls);
      EXPECT_LE(timed.size() * every, calls + skipped + every);
    }
    EXPECT_EQ(r.traces[0].report.latency_samples, timed.size());
  }
}

TEST(CaptureMemory, CoverageWarnsWhenTheTraceExplainsLittle) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_memory"), "hidden"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_GE(r.anon_rss_peak_kib, 64u * 1024);  // the 64 MiB the shim cannot see
  const double coverage = r.traces[0].report.coverage;
  EXPECT_GE(coverage, 0.0);
  EXPECT_LT(coverage, 0.05);
  nlohmann::json cap = capture_metadata(r.traces[0].path);
  EXPECT_EQ(cap.value("anon_rss_peak_kib", uint64_t{0}), r.anon_rss_peak_kib);
  EXPECT_DOUBLE_EQ(cap.value("coverage", -1.0), coverage);
  const std::string text = heaplab::launch::summary(r, opt);
  EXPECT_NE(text.find("heaplab capture:   warning: the trace explains only 0% of the program's peak anonymous memory"),
            std::string::npos)
      << text;
  heaplab::analysis::TraceStats st = heaplab::analysis::compute_stats(*TraceReader::open(r.traces[0].path));
  EXPECT_NE(heaplab::analysis::stats_to_text(st).find("warning: the trace explains only 0%"), std::string::npos);
  EXPECT_EQ(heaplab::analysis::stats_to_json(st)["coverage"]["warning"], true);
}

// ---------------------------------------------------------------------------

bool dir_empty(const TempDir& d) { return fs::is_empty(d.path()); }

void expect_error(CaptureOptions opt, const std::string& want, bool prefix_only, const TempDir& dir) {
  for (int via_validate = 0; via_validate < 2; ++via_validate) {
    SCOPED_TRACE(via_validate ? "validate()" : "run_capture()");
    CaptureOptions o = opt;
    try {
      if (via_validate)
        heaplab::launch::validate(o);
      else
        heaplab::launch::run_capture(o);
      ADD_FAILURE() << "no LaunchError; want: " << want;
    } catch (const LaunchError& e) {
      std::string msg = e.what();
      if (prefix_only)
        EXPECT_EQ(msg.substr(0, want.size()), want) << msg;
      else
        EXPECT_EQ(msg, want);
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a LaunchError: " << e.what();
    }
    // Nothing ran and nothing was created: no output, no raw directory.
    EXPECT_TRUE(dir_empty(dir)) << "validation left files in " << dir.path();
  }
}

TEST(CaptureBadInput, MissingProgram) {
  TempDir dir;
  expect_error(options(dir, {"no-such-prog-xyz"}), "program 'no-such-prog-xyz' not found in PATH", false, dir);
}

TEST(CaptureBadInput, MissingProgramPath) {
  TempDir dir;
  expect_error(options(dir, {dir.file("nope")}), "cannot run '" + dir.file("nope") + "': No such file or directory",
               false, dir);
}

// A script whose #! line names an interpreter that is not there: the error
// names the interpreter (it said the script itself was not there). A script
// without a #! line runs under /bin/sh, as a shell runs it (it was refused
// with "Exec format error").
TEST(CaptureBadInput, ScriptsAsAShellRunsThem) {
  TempDir scripts, dir;
  const std::string bad = scripts.file("bad.sh"), plain = scripts.file("plain.sh");
  std::ofstream(bad) << "#!/nonexistent/interp -x\necho hi\n";
  std::ofstream(plain) << "exit 0\n";
  for (const std::string& f : {bad, plain}) std::filesystem::permissions(f, std::filesystem::perms::owner_all);
  CaptureOptions o = options(dir, {bad});
  try {
    heaplab::launch::run_capture(o);
    ADD_FAILURE() << "no LaunchError";
  } catch (const LaunchError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot run '" + bad +
                                         "': its interpreter '/nonexistent/interp' (its #! line): No such file or "
                                         "directory");
  }
  EXPECT_TRUE(dir_empty(dir));
  // A #! line with CRLF line ends (the kernel looks for "sh\r"); a binary
  // the kernel cannot run (NUL bytes: not a script, not run by /bin/sh).
  const std::string crlf = scripts.file("crlf.sh"), binary = scripts.file("binary");
  std::ofstream(crlf) << "#!/bin/sh\r\necho hi\r\n";
  std::ofstream(binary, std::ios::binary) << std::string("\x01\x02\x03\0\0\0binary", 12) << std::string(64, '\0');
  for (const std::string& f : {crlf, binary}) std::filesystem::permissions(f, std::filesystem::perms::owner_all);
  for (const auto& [f, why] :
       {std::pair<std::string, std::string>{crlf,
                                            "its interpreter '/bin/sh' (its #! line) ends in a carriage return: "
                                            "the script has CRLF line ends (dos2unix)"},
        {binary, "Exec format error"}}) {
    CaptureOptions c = options(dir, {f});
    try {
      heaplab::launch::run_capture(c);
      ADD_FAILURE() << "no LaunchError for " << f;
    } catch (const LaunchError& e) {
      EXPECT_EQ(std::string(e.what()), "cannot run '" + f + "': " + why);
    }
  }
  CaptureOptions p = options(dir, {plain});
  const CaptureResult r = heaplab::launch::run_capture(p);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_GT(r.traces[0].report.events, 0u);  // /bin/sh's own calls
}

TEST(CaptureBadInput, MissingAllocatorLibrary) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  opt.allocator = "/nonexistent/lib.so";
  expect_error(opt, "allocator '/nonexistent/lib.so': ", true, dir);
}

TEST(CaptureBadInput, UnknownAllocatorName) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  opt.allocator = "nosuchalloc";
  expect_error(opt,
               "allocator 'nosuchalloc': unknown name (known: glibc, jemalloc, mimalloc, tcmalloc; or give "
               "the path of a .so)",
               false, dir);
}

TEST(CaptureBadInput, UnwritableOutput) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  opt.output = dir.file("no-such-dir/out.hlt");
  expect_error(opt, "cannot write output '" + opt.output + "': No such file or directory", false, dir);
}

TEST(CaptureBadInput, OutputIsDirectory) {
  TempDir dir;
  TempDir other;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  opt.output = other.path();
  expect_error(opt, "cannot write output '" + other.path() + "': is a directory", false, dir);
}

TEST(CaptureBadInput, MissingShim) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  opt.shim = dir.file("libheaplab_capture.so");
  expect_error(opt, "capture shim '" + opt.shim + "' not found: No such file or directory", true, dir);
}

// victim_c linked with -static (no PT_INTERP, no PT_DYNAMIC) and with
// -static-pie (no PT_INTERP, but a PT_DYNAMIC for its self-relocation): both
// ignore LD_PRELOAD. Built by capture/testprogs/CMakeLists.txt when the
// toolchain can link static programs.
#ifndef HEAPLAB_TEST_HAVE_STATIC
#define HEAPLAB_TEST_HAVE_STATIC 0
#endif
#ifndef HEAPLAB_TEST_HAVE_STATIC_PIE
#define HEAPLAB_TEST_HAVE_STATIC_PIE 0
#endif

TEST(CaptureBadInput, StaticallyLinkedProgram) {
  if (!HEAPLAB_TEST_HAVE_STATIC) GTEST_SKIP() << "the toolchain cannot link static programs";
  TempDir dir;
  const std::string prog = victim("victim_c_static");
  expect_error(options(dir, {prog, "single"}), "'" + prog + "' is statically linked: LD_PRELOAD cannot capture it",
               false, dir);
}

// A static-pie executable has a PT_DYNAMIC segment (for relocating itself)
// but no PT_INTERP: no dynamic loader, so LD_PRELOAD is ignored just the
// same (Debian's /sbin/ldconfig is one).
TEST(CaptureBadInput, StaticPieProgram) {
  if (!HEAPLAB_TEST_HAVE_STATIC_PIE) GTEST_SKIP() << "the toolchain cannot link static-pie programs";
  TempDir dir;
  const std::string prog = victim("victim_c_static_pie");
  expect_error(options(dir, {prog, "single"}), "'" + prog + "' is statically linked: LD_PRELOAD cannot capture it",
               false, dir);
}

// ---------------------------------------------------------------------------

TEST(CaptureRaw, RemovedAfterSuccess) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_FALSE(r.raw_kept);
  EXPECT_FALSE(r.raw_dir.empty());
  EXPECT_FALSE(fs::exists(r.raw_dir)) << r.raw_dir;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"out.hlt"});
}

TEST(CaptureRaw, KeptOnRequest) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  opt.keep_raw = true;
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_TRUE(r.raw_kept);
  ASSERT_TRUE(fs::is_directory(r.raw_dir)) << r.raw_dir;
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(r.raw_dir)) names.insert(e.path().filename().string());
  const std::string pid = std::to_string(r.traces[0].pid);
  EXPECT_EQ(names, (std::set<std::string>{pid + ".0.hlraw", pid + ".0.hlraw.blocks"}));
  // The default raw directory is OUTPUT.raw.PID, next to the output.
  EXPECT_EQ(fs::path(r.raw_dir).parent_path(), fs::path(dir.path()));
  EXPECT_EQ(fs::path(r.raw_dir).filename().string().rfind("out.hlt.raw.", 0), 0u) << r.raw_dir;
}

TEST(CaptureRaw, ExplicitRawDirKept) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_c"), "fork"});
  opt.follow_fork = true;
  opt.keep_raw = true;
  opt.raw_dir = dir.file("raw");
  CaptureResult r = heaplab::launch::run_capture(opt);
  ASSERT_EQ(r.traces.size(), 2u);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(opt.raw_dir)) names.insert(e.path().filename().string());
  std::set<std::string> want;
  for (const TraceResult& t : r.traces) {
    want.insert(std::to_string(t.pid) + ".0.hlraw");
    want.insert(std::to_string(t.pid) + ".0.hlraw.blocks");
  }
  EXPECT_EQ(names, want);
}

// A --raw-dir that already holds the user's files: only the capture's own
// raw files are removed afterwards.
TEST(CaptureRaw, ExistingRawDirKeepsItsOtherFiles) {
  TempDir dir;
  std::string raw = dir.file("mine");
  fs::create_directory(raw);
  heaplab::trace::testutil::write_file(raw + "/notes.txt", "important");
  CaptureOptions opt = options(dir, {victim("victim_c"), "single"});
  opt.raw_dir = raw;
  CaptureResult r = heaplab::launch::run_capture(opt);
  ASSERT_EQ(r.traces.size(), 1u);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(raw)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, std::set<std::string>{"notes.txt"});
  EXPECT_EQ(heaplab::trace::testutil::read_file(raw + "/notes.txt"), "important");
}

// Under a file-size limit the capture stops with a message when the raw
// file would pass it; the program is never killed by SIGXFSZ. Normalised
// after, every block is appended to the raw files, which pass 8 MiB;
// normalised live, full blocks stay in the shared mapping and are written
// again once read, so the same program is (as a rule) captured whole.
TEST(Capture, FileSizeLimitStopsCaptureNotTheProgram) {
  for (const bool live : {false, true}) {
    SCOPED_TRACE(live ? "live" : "after");
    TempDir dir;
    // 16384 blocks of 512 bytes (POSIX sh units): 8 MiB.
    CaptureOptions opt =
        options(dir, {"/bin/sh", "-c", "ulimit -f 16384 && exec " + victim("victim_c") + " signal 600000 > /dev/null"});
    opt.follow_exec = true;
    opt.live = live;
    CaptureResult r = heaplab::launch::run_capture(opt);
    EXPECT_EQ(r.signal, 0);
    EXPECT_EQ(r.exit_code, 0);
    bool found = false;
    for (const auto& t : r.traces) {
      if (t.command_line.size() < 2 || t.command_line[1] != "signal") continue;
      found = true;
      if (live) {
        // (Whole unless the reader fell so far behind that the shim had
        // to grow its file past the limit: then counted, as after.)
        EXPECT_TRUE(t.report.stop_error == 0 || t.report.stop_error == EFBIG) << t.report.stop_error;
        EXPECT_GE(t.report.calls + t.report.dropped_calls, 1200004u);  // the pairs and the markers, at least
        EXPECT_EQ(lost_in(t.path), t.report.dropped_calls);
      } else {
        EXPECT_GT(t.report.calls, 100000u);   // what fitted under the limit
        EXPECT_LT(t.report.calls, 1200000u);  // not all of it
        // The rest counted, in the trace: every call accounted for.
        EXPECT_EQ(t.report.stop_error, EFBIG);
        EXPECT_GT(t.report.dropped_calls, 0u);
        EXPECT_GE(t.report.calls + t.report.dropped_calls, 1200004u);
        EXPECT_EQ(lost_in(t.path), t.report.dropped_calls);
      }
      expect_trace_ok(t.path);
    }
    EXPECT_TRUE(found);
  }
}

// A 16 MiB file system for the raw files (tmpfs; skipped where mounting is
// not allowed): normalising live, its blocks given back as they are consumed,
// a capture of ~50 MiB of raw blocks fits; normalised after, the disk fills
// mid-run and every call after is counted, not lost silently; full before
// the start, the program runs uncaptured and capture says so.
TEST(Capture, SmallAndFullDisk) {
  TempDir dir;
  const heaplab::trace::testutil::SmallFs small(dir.file("fs"));
  if (!small.why_not.empty()) GTEST_SKIP() << small.why_not;
  const std::string& mnt = small.path;
  const std::vector<std::string> prog = {victim("churn"), "1", "400000"};  // one thread: the same calls each run

  CaptureOptions live = options(dir, prog);
  live.raw_dir = mnt + "/live";
  CaptureResult r1 = heaplab::launch::run_capture(live);
  ASSERT_EQ(r1.exit_code, 0);
  ASSERT_TRUE(r1.failed.empty()) << failed_list(r1);
  ASSERT_EQ(r1.traces.size(), 1u);
  EXPECT_EQ(r1.traces[0].report.dropped_calls, 0u);
  EXPECT_EQ(r1.traces[0].report.holes, 0u);
  EXPECT_GT(r1.traces[0].report.calls, 1600000u);

  CaptureOptions after = options(dir, prog);
  after.output = dir.file("after.hlt");
  after.raw_dir = mnt + "/after";
  after.live = false;
  CaptureResult r2 = heaplab::launch::run_capture(after);
  ASSERT_EQ(r2.exit_code, 0);
  ASSERT_TRUE(r2.failed.empty()) << failed_list(r2);
  ASSERT_EQ(r2.traces.size(), 1u);
  const auto& rep = r2.traces[0].report;
  EXPECT_EQ(rep.stop_error, ENOSPC);
  EXPECT_GT(rep.dropped_calls, 1000000u);
  EXPECT_EQ(rep.calls + rep.dropped_calls, r1.traces[0].report.calls);  // every call accounted for
  EXPECT_EQ(lost_in(r2.traces[0].path), rep.dropped_calls);
  std::filesystem::remove_all(mnt + "/after");

  // Full before the start.
  {
    std::ofstream fill(mnt + "/fill", std::ios::binary);
    std::string mib(1 << 20, 'x');
    while (fill.write(mib.data(), std::streamsize(mib.size()))) {
    }
  }
  // The program runs as it would have, every heap call counted in the
  // header the shim put in heaplab's spare memfd, and its trace (written
  // elsewhere) holds one `lost` event with them all: the same calls as the
  // capture that had room (r1), both modes, and a fork child followed.
  for (const bool live_mode : {true, false}) {
    SCOPED_TRACE(live_mode ? "live" : "after");
    CaptureOptions full = options(dir, prog);
    full.output = dir.file(live_mode ? "full-live.hlt" : "full-after.hlt");
    full.raw_dir = mnt + (live_mode ? "/full-live" : "/full-after");
    full.live = live_mode;
    CaptureResult r3;
    try {
      r3 = heaplab::launch::run_capture(full);
    } catch (const LaunchError& e) {
      FAIL() << e.what();
    }
    EXPECT_EQ(r3.exit_code, 0);
    EXPECT_TRUE(r3.failed.empty()) << failed_list(r3);
    ASSERT_EQ(r3.traces.size(), 1u);
    const auto& full_rep = r3.traces[0].report;
    EXPECT_EQ(r3.traces[0].path, full.output);
    EXPECT_EQ(full_rep.stop_error, ENOSPC);
    EXPECT_EQ(full_rep.calls, 0u);
    EXPECT_EQ(full_rep.dropped_calls, r1.traces[0].report.calls);
    EXPECT_EQ(lost_in(full.output), full_rep.dropped_calls);
    auto rd = TraceReader::open(full.output);
    const heaplab::analysis::CheckReport check = heaplab::analysis::check_trace(*rd);
    EXPECT_EQ(check.lost_events, full_rep.dropped_calls);  // `heaplab check` fails on it
  }
  // The program execs (not followed): its first image's spare trace only
  // (the empty raw file the shim leaves tells the new image it is not the
  // first; its note of the exec cannot be written on the full disk, and is
  // counted in the spare memfd instead).
  CaptureOptions execs = options(dir, {victim("victim_c"), "exec"});
  execs.output = dir.file("full-exec.hlt");
  execs.raw_dir = mnt + "/full-exec";
  const CaptureResult r5 = heaplab::launch::run_capture(execs);
  EXPECT_EQ(r5.exit_code, 0);
  EXPECT_TRUE(r5.failed.empty()) << failed_list(r5);
  ASSERT_EQ(r5.traces.size(), 1u);
  EXPECT_EQ(r5.traces[0].path, execs.output);
  EXPECT_GT(r5.traces[0].report.dropped_calls, 0u);
  ASSERT_EQ(r5.traces[0].command_line.size(), 2u);
  EXPECT_EQ(r5.traces[0].command_line[1], "exec");  // the first image's, not the exec'd one's
  EXPECT_TRUE(r5.unfollowed.empty());
  EXPECT_EQ(r5.unnoted_execs, 1u);
  EXPECT_EQ(r5.unnoted_forks, 0u);
  EXPECT_NE(heaplab::launch::summary(r5, execs).find(
                "1 more process image was not followed (1 exec'd, 0 forked) and could not be named"),
            std::string::npos);
  CaptureOptions forks = options(dir, {victim("victim_c"), "forkfirst", "1000"});
  forks.output = dir.file("full-fork.hlt");
  forks.raw_dir = mnt + "/full-fork";
  forks.follow_fork = true;
  const CaptureResult r4 = heaplab::launch::run_capture(forks);
  EXPECT_EQ(r4.exit_code, 0);
  EXPECT_TRUE(r4.failed.empty()) << failed_list(r4);
  ASSERT_EQ(r4.traces.size(), 2u);
  EXPECT_EQ(r4.traces[0].path, forks.output);
  EXPECT_NE(r4.traces[1].pid, r4.pid);
  EXPECT_EQ(r4.traces[1].report.stop_error, ENOSPC);
  EXPECT_GE(r4.traces[1].report.dropped_calls, 2000u);  // the child's 1,000 pairs at least
  EXPECT_EQ(lost_in(r4.traces[1].path), r4.traces[1].report.dropped_calls);
  // Not followed: the child is counted, though its note cannot be written.
  forks.output = dir.file("full-nofollow.hlt");
  forks.raw_dir = mnt + "/full-nofollow";
  forks.follow_fork = false;
  const CaptureResult r6 = heaplab::launch::run_capture(forks);
  EXPECT_EQ(r6.exit_code, 0);
  EXPECT_EQ(r6.traces.size(), 1u);
  EXPECT_TRUE(r6.unfollowed.empty());
  EXPECT_EQ(r6.unnoted_execs, 0u);
  EXPECT_EQ(r6.unnoted_forks, 1u);
}

// A live capture on a disk too small for its raw data waits for the reader
// to give space or blocks back, signals blocked (a handler that allocates
// runs once the block has moved on): every call of the program and of its
// signal handler is recorded.
TEST(Capture, SignalHandlerAllocationsOnASmallDisk) {
  TempDir dir;
  const heaplab::trace::testutil::SmallFs small(dir.file("fs"));
  if (!small.why_not.empty()) GTEST_SKIP() << small.why_not;
  const std::string& mnt = small.path;
  CaptureOptions opt = options(dir, {victim("victim_c"), "signal", "1500000"});
  opt.raw_dir = mnt + "/raw";
  expect_every_signal_call(dir, opt);
}

// A program that closes every descriptor it did not open (as daemons do) and
// opens files of its own: the capture stops, and never writes into them.
TEST(Capture, ProgramClosingOurDescriptorsKeepsItsFiles) {
  TempDir dir;
  std::string file = dir.file("program-output.txt");
  CaptureOptions opt = options(dir, {victim("victim_c"), "closefds", file});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(heaplab::trace::testutil::read_file(file), "mine");
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_GE(r.traces[0].report.calls, 11u);  // at least what came before the descriptors went
  // Every call after the capture stopped is counted, and the trace says so.
  const auto& rep = r.traces[0].report;
  EXPECT_EQ(rep.stop_error, -1);
  EXPECT_GE(rep.calls + rep.dropped_calls, 40014u);  // the loop's 40,000, the mallocs and markers at least
  EXPECT_GT(rep.dropped_calls, 40000u - 2046u);
  EXPECT_EQ(lost_in(r.traces[0].path), rep.dropped_calls);
  expect_trace_ok(r.traces[0].path);
}

// More threads than one segment of the mapping holds (64 slots).
TEST(Capture, ManyThreadsAcrossMappingSegments) {
  TempDir dir;
  CaptureOptions opt = options(dir, {victim("victim_cpp"), "threads", "60", "60", "500"});
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_GE(r.traces[0].report.threads, 121u);
  auto calls = between_markers(read_events(r.traces[0].path), false);
  ASSERT_TRUE(calls);
  // The producers' objects (sizes 16..79; thread start-up allocates others).
  std::set<uint64_t> objects;
  uint64_t freed = 0;
  for (const Event& e : *calls) {
    if (e.op == Op::malloc && e.size >= 16 && e.size <= 79) objects.insert(e.id);
    if (e.op == Op::free && objects.count(e.old)) ++freed;
  }
  EXPECT_EQ(objects.size(), 30000u);
  EXPECT_EQ(freed, 30000u);
  expect_trace_ok(r.traces[0].path);
}

// ---------------------------------------------------------------- --method pt
// These machines have no Intel PT. The route around the hardware is tested
// with a fake intel_pt sysfs directory ($HEAPLAB_PT_SYSFS) and pt_fake_perf
// in place of perf record: it runs the program under the shim (whose
// ptwrite sink falls back to files here), encodes what the sink would have
// written with ptwrite into Intel PT packets in a perf.data, and leaves the
// sink's markers. heaplab then decodes that as it would a real recording.
struct FakePt {
  TempDir sys;
  explicit FakePt(const char* ptwrite = "1") {
    fs::create_directories(sys.file("caps"));
    std::ofstream(sys.file("type")) << "10\n";
    std::ofstream(sys.file("caps/ptwrite")) << ptwrite << "\n";
    setenv("HEAPLAB_PT_SYSFS", sys.path().c_str(), 1);
  }
  ~FakePt() { unsetenv("HEAPLAB_PT_SYSFS"); }
};

std::string fake_perf() { return binary_dir() + "/capture/pt/pt_fake_perf"; }

CaptureOptions pt_options(const TempDir& dir, std::vector<std::string> argv, const std::string& decoder,
                          const std::string& out) {
  CaptureOptions opt = options(dir, std::move(argv));
  opt.output = dir.file(out);
  opt.method = "pt";
  opt.pt.perf = fake_perf();
  opt.pt_decoder = decoder;
  return opt;
}

// The same calls as the software route, exactly, through each decoder; perf
// gets the intel_pt event heaplab needs and runs the program through the
// shell that preloads the shim.
TEST(CapturePt, SingleThreadExactSequenceThroughEveryDecoder) {
  FakePt fake;
  for (const char* dec : {"direct", "dlfilter", "text"}) {
    SCOPED_TRACE(dec);
    TempDir dir;
    CaptureOptions opt = pt_options(dir, {victim("victim_c"), "single"}, dec, "pt.hlt");
    opt.keep_raw = true;
    CaptureResult r = heaplab::launch::run_capture(opt);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.method, "pt");
    EXPECT_TRUE(r.failed.empty()) << failed_list(r);
    ASSERT_EQ(r.traces.size(), 1u);
    EXPECT_EQ(r.traces[0].report.holes, 0u);
    std::vector<Event> evs = read_events(r.traces[0].path);
    auto mid = between_markers(evs, false);
    ASSERT_TRUE(mid);
    expect_sequence(*mid, single_sequence());
    expect_trace_ok(r.traces[0].path);
    nlohmann::json cap = capture_metadata(r.traces[0].path);
    EXPECT_EQ(cap.value("method", ""), "intel-pt");
    EXPECT_EQ(cap["pt"].value("decoder", ""), dec);
    EXPECT_EQ(cap["pt"].value("lost_events", 1), 0);
    EXPECT_EQ(cap.value("exit_code", -1), 0);
    // What perf was asked to do.
    std::ifstream a(r.perf_data + ".argv");
    std::vector<std::string> args;
    for (std::string l; std::getline(a, l);) args.push_back(l);
    ASSERT_EQ(args.size(), 13u);
    EXPECT_EQ(
        std::vector<std::string>(args.begin() + 1, args.begin() + 6),
        (std::vector<std::string>{"record", "-o", r.perf_data, "-e", "intel_pt/ptw=1,branch=0,fup_on_ptw=0,mtc=0/u"}));
    EXPECT_EQ(args[6], "--");
    EXPECT_EQ(args[7], "/bin/sh");
    EXPECT_EQ(args[10], shim_path());  // LD_PRELOAD for the program only
    EXPECT_EQ(args[11], victim("victim_c"));
    EXPECT_EQ(args[12], "single");
  }
}

// A pt capture inside a software capture: the outer launcher's spare
// headers (HEAPLAB_CAPTURE_SPARE) are not handed on to the program, which
// would count its unfollowed images into the outer capture's memfd.
TEST(CapturePt, OuterSpareHeadersAreNotHandedOn) {
  FakePt fake;
  TempDir dir;
  setenv("HEAPLAB_CAPTURE_SPARE", "1000", 1);
  CaptureOptions opt =
      pt_options(dir, {"/bin/sh", "-c", "printf '%s' \"${HEAPLAB_CAPTURE_SPARE-unset}\""}, "direct", "pt.hlt");
  const std::string out = dir.file("stdout.txt");
  const CaptureResult r = run_with_stdout(opt, out);
  unsetenv("HEAPLAB_CAPTURE_SPARE");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(heaplab::trace::testutil::read_file(out), "unset");
}

// Threads, cross-thread frees: every call of every thread decoded.
TEST(CapturePt, ThreadsCrossThreadFrees) {
  FakePt fake;
  TempDir dir;
  CaptureResult r = heaplab::launch::run_capture(
      pt_options(dir, {victim("victim_cpp"), "threads", "2", "2", "3000"}, "direct", "pt.hlt"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failed.empty()) << failed_list(r);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_GE(r.traces[0].report.threads, 5u);
  std::vector<Event> evs = read_events(r.traces[0].path);
  auto mid = between_markers(evs, false);
  ASSERT_TRUE(mid);
  std::unordered_map<uint64_t, uint32_t> owner;
  uint64_t mallocs = 0, frees = 0, cross = 0;
  for (const Event& e : *mid) {
    if (e.op == Op::malloc && e.size >= 16 && e.size <= 79 && e.id) {
      ++mallocs;
      owner[e.id] = e.thread;
    } else if (e.op == Op::free && owner.count(e.old)) {
      ++frees;
      cross += owner[e.old] != e.thread;
    }
  }
  EXPECT_EQ(mallocs, 6000u);
  EXPECT_EQ(frees, 6000u);
  EXPECT_GT(cross, 0u);
  expect_trace_ok(r.traces[0].path);
  EXPECT_FALSE(fs::exists(r.perf_data)) << "the recording is removed unless --keep-raw";
}

// The program's exit status comes through perf.
TEST(CapturePt, ExitStatusAndCrash) {
  FakePt fake;
  TempDir dir;
  CaptureResult r =
      heaplab::launch::run_capture(pt_options(dir, {victim("victim_c"), "crash", "abort", "100"}, "direct", "pt.hlt"));
  EXPECT_EQ(r.signal, SIGABRT);
  EXPECT_EQ(r.exit_code, 128 + SIGABRT);
  ASSERT_EQ(r.traces.size(), 1u);
  EXPECT_EQ(capture_metadata(r.traces[0].path).value("signal", 0), SIGABRT);
}

// Where PT or ptwrite is missing: one line naming what, before anything
// runs, or the software method by request.
TEST(CapturePt, RefusesWithoutPtNamingWhatIsMissing) {
  TempDir dir;
  setenv("HEAPLAB_PT_SYSFS", dir.file("no-intel_pt").c_str(), 1);
  CaptureOptions opt = pt_options(dir, {victim("victim_c"), "single"}, "direct", "pt.hlt");
  try {
    heaplab::launch::run_capture(opt);
    ADD_FAILURE() << "no error";
  } catch (const LaunchError& e) {
    EXPECT_EQ(std::string(e.what()), "--method pt: this machine has no Intel PT (no " + dir.file("no-intel_pt") +
                                         ": not an Intel CPU with Processor Trace, or a virtual machine that hides "
                                         "it); use --method software (or --pt-fallback software)");
  }
  EXPECT_FALSE(fs::exists(opt.output));
  unsetenv("HEAPLAB_PT_SYSFS");
  {
    FakePt no_ptwrite("0");
    try {
      heaplab::launch::run_capture(opt);
      ADD_FAILURE() << "no error";
    } catch (const LaunchError& e) {
      EXPECT_NE(
          std::string(e.what()).find("Intel PT has no ptwrite (" + no_ptwrite.sys.path() + "/caps/ptwrite is not 1"),
          std::string::npos)
          << e.what();
    }
    opt.pt.perf = dir.file("no-perf");
    FakePt fake;
    try {
      heaplab::launch::run_capture(opt);
      ADD_FAILURE() << "no error";
    } catch (const LaunchError& e) {
      EXPECT_EQ(std::string(e.what()), "--method pt: cannot run '" + dir.file("no-perf") +
                                           " version' (perf records the trace: apt-get install linux-perf); use "
                                           "--method software (or --pt-fallback software)");
    }
  }
  // The real machine (no PT on these VMs), falling back.
  opt.pt.perf = "perf";
  opt.pt_fallback = "software";
  CaptureResult r = heaplab::launch::run_capture(opt);
  EXPECT_EQ(r.method, "software");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("recorded with --method software instead"), std::string::npos) << r.notes[0];
  ASSERT_EQ(r.traces.size(), 1u);
  auto mid = between_markers(read_events(r.traces[0].path), false);
  ASSERT_TRUE(mid);
  expect_sequence(*mid, single_sequence());
}

TEST(CapturePt, BadOptions) {
  TempDir dir;
  CaptureOptions opt = pt_options(dir, {victim("victim_c"), "single"}, "direct", "pt.hlt");
  const auto error = [&](CaptureOptions o) {
    try {
      heaplab::launch::run_capture(o);
    } catch (const LaunchError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CaptureOptions o = opt;
  o.pt.buffers = "per-core";
  EXPECT_EQ(error(o), "--pt-buffers: per-cpu or per-thread, not 'per-core'");
  o = opt;
  o.pt.snapshot = "lots";
  EXPECT_EQ(error(o), "--pt-snapshot: 'on' or a size such as 64M, not 'lots'");
  o = opt;
  o.follow_exec = true;
  EXPECT_EQ(error(o),
            "--method pt cannot follow exec yet (the images of a process share its trace); use --method software");
  o = opt;
  o.pt_decoder = "magic";
  EXPECT_EQ(error(o), "--pt-decoder: direct, dlfilter or text, not 'magic'");
}

// The perf record command for the other options.
TEST(CapturePt, PerfRecordArguments) {
  heaplab::pt::PtRecordOptions o;
  o.buffers = "per-thread";
  o.aux_kib = 3000;
  o.snapshot = "64M";
  o.control = "fifo:ctl,ack";
  o.psb_period = 3;
  EXPECT_EQ(heaplab::pt::perf_record_argv(o, "out.data", "shim.so:je.so", {"prog", "arg"}),
            (std::vector<std::string>{
                "perf", "record", "-o", "out.data", "-e", "intel_pt/ptw=1,branch=0,fup_on_ptw=0,mtc=0,psb_period=3/u",
                "--per-thread", "-m,1024", "--snapshot=64M", "--control=fifo:ctl,ack", "--", "/bin/sh", "-c",
                "export LD_PRELOAD=\"$0\" HEAPLAB_CAPTURE_ROOT=$$; exec \"$@\"", "shim.so:je.so", "prog", "arg"}));
}

}  // namespace
