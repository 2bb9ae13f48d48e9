// End-to-end tests of `heaplab replay --emit-trace` and `heaplab layout` on
// real allocators: the Compact Memory Traces seed's SPEC traces and a
// captured multi-threaded program, replayed on all four allocators. The
// addresses each allocator returned are checked against a model written
// here independently of analysis/layout.cpp (page reference counts instead
// of neighbour tests): no two live blocks overlap, every note's neighbours,
// gaps and page counts agree with the addresses. The annotated text of a
// stored replay is golden-tested.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/layout.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"
#include "replay/run_testutil.h"

namespace {

namespace fs = std::filesystem;
using heaplab::analysis::kLayoutPage;
using heaplab::analysis::LayoutAnalyzer;
using heaplab::analysis::LayoutNote;
using heaplab::testutil::run;
using heaplab::testutil::slurp;
using heaplab::trace::Event;
using nlohmann::json;

const std::string kBin = HEAPLAB_TEST_BINARY_DIR;
const std::string kSrc = HEAPLAB_TEST_SOURCE_DIR;
const std::string kHeaplab = kBin + "/cli/heaplab";
const std::vector<std::string> kAllocators = {"glibc", "jemalloc", "mimalloc", "tcmalloc"};

fs::path dir() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("heaplab_layout_test." + std::to_string(getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// The traces: the seed's two SPEC traces, imported, and a captured program
// whose two producer threads' blocks are freed by two consumer threads.
std::map<std::string, std::string>& traces() {
  static std::map<std::string, std::string> t = [] {
    std::map<std::string, std::string> m;
    for (const auto& [key, name] : {std::pair{"bzip2", "401.bzip2.txt"}, {"hmmer", "456.hmmer.test.txt.bz2"}}) {
      const std::string out = (dir() / (std::string(key) + ".hlt")).string();
      const auto r = run(
          {kHeaplab, "import", "--from", "cmt-text", kSrc + "/capture/testdata/cmt/" + std::string(name), "-o", out});
      EXPECT_EQ(r.code, 0) << r.err;
      m[key] = out;
    }
    {
      // A realloc that fails in the trace (a huge request) but not in the
      // replay: the program keeps its object, which the replay moved.
      const std::string path = (dir() / "failed-realloc.hlt").string();
      heaplab::trace::TraceWriter w(path, heaplab::trace::WriterOptions{});
      Event e;
      e.op = heaplab::trace::Op::malloc;
      e.size = 16;
      w.append(e);
      Event r;
      r.op = heaplab::trace::Op::realloc;
      r.old = 1;
      r.size = 100000;
      r.flags = heaplab::trace::kFailed | heaplab::trace::kNullResult;
      w.append(r);
      for (int i = 0; i < 8; ++i) {
        Event x;
        x.op = heaplab::trace::Op::malloc;
        x.size = 16;
        w.append(x);
      }
      Event f;
      f.op = heaplab::trace::Op::free;
      f.old = 1;
      w.append(f);
      w.close();
      m["failed-realloc"] = path;
    }
    const std::string out = (dir() / "threads.hlt").string();
    const auto r = run({kHeaplab, "capture", "-q", "-o", out, "--", kBin + "/capture/testprogs/victim_cpp", "threads",
                        "2", "2", "3000"});
    EXPECT_EQ(r.code, 0) << r.err;
    m["threads"] = out;
    return m;
  }();
  return t;
}

// The model: live blocks by address, and how many live blocks lie on each
// page. Fed the emitted trace, it checks the allocator (no overlaps, an
// address for every call that succeeded) and every note of the analyzer.
struct Model {
  std::map<uint64_t, uint64_t> live;  // address -> end
  std::unordered_map<uint64_t, uint64_t> ids;
  std::map<uint64_t, uint64_t> id_at;        // address -> object id
  std::unordered_map<uint64_t, bool> early;  // reused early
  std::unordered_map<uint64_t, uint32_t> on_page;
  uint64_t pages = 0;

  int64_t add(uint64_t a, uint64_t end, int sign) {
    int64_t d = 0;
    for (uint64_t p = a / kLayoutPage; p <= (end - 1) / kLayoutPage; ++p) {
      uint32_t& n = on_page[p];
      if (sign > 0 && n++ == 0) ++d;
      if (sign < 0 && --n == 0) --d;
    }
    pages = uint64_t(int64_t(pages) + d);
    return d;
  }
};

// Checks one emitted trace; returns the peak of the model's working set.
// `early_reuse`: the blocks another thread's block was placed on before the
// trace freed them (none in a trace of one thread).
uint64_t check_emitted(const std::string& path, const std::string& what, uint64_t* early_reuse = nullptr) {
  auto r = heaplab::trace::TraceReader::open(path);
  EXPECT_TRUE(r->has_addresses()) << what;
  EXPECT_EQ(r->minor_version(), 2) << what;
  heaplab::trace::AddressCursor addresses(*r);
  const bool in_order = r->active_threads().size() == 1;
  LayoutAnalyzer layout(r->event_count(), in_order);
  Model m;
  uint64_t peak = 0, placed = 0, failures = 0, reused = 0;
  for (const Event& e : heaplab::trace::testutil::read_all(*r)) {
    const uint64_t a = addresses.at(e.seq);
    const LayoutNote n = layout.observe(e, a);
    int64_t delta = 0;
    const bool produces = heaplab::trace::op_produces(e.op) && !(e.flags & heaplab::trace::kNullResult);
    // A realloc that failed in the trace names its object where the
    // replay left it: moved, if the call succeeded there.
    const bool moved = (e.flags & heaplab::trace::kFailed) && heaplab::trace::op_consumes(e.op) && e.old != 0 &&
                       m.ids.count(e.old) && m.ids[e.old] != a;
    const bool releases =
        heaplab::trace::op_consumes(e.op) && e.old != 0 && (!(e.flags & heaplab::trace::kFailed) || moved);
    if (releases && m.early.count(e.old)) {
      m.early.erase(e.old);  // taken as freed when a block was placed on it
    } else if (releases) {
      auto it = m.ids.find(e.old);
      if (it == m.ids.end()) {
        ++failures;
        continue;
      }
      const uint64_t old = it->second;
      if (!produces && !moved && a != old) ++failures;  // a release names its block's address
      m.ids.erase(it);
      delta += m.add(old, m.live[old], -1);
      m.live.erase(old);
      m.id_at.erase(old);
    }
    if (produces || moved) {
      if (a == 0) {
        ++failures;  // the allocator said NULL where the program got memory
        continue;
      }
      const uint64_t object = produces ? e.id : e.old;
      const uint64_t end = a + std::max<uint64_t>(e.requested_bytes(), 1);
      // Live blocks this one lies on: freed in the replay already (by
      // another thread than the one that made this call, or the allocator
      // handed out live memory).
      std::vector<uint64_t> under;
      auto from = m.live.lower_bound(a);
      if (from != m.live.begin() && std::prev(from)->second > a) --from;
      for (; from != m.live.end() && from->first < end; ++from) under.push_back(from->first);
      for (uint64_t at : under) {
        const uint64_t id = m.id_at[at];
        m.early[id] = true;
        m.ids.erase(id);
        m.id_at.erase(at);
        delta += m.add(at, m.live[at], -1);
        m.live.erase(at);
        ++reused;
      }
      auto next = m.live.lower_bound(a);
      // The note's neighbours and gaps, from the model's map.
      EXPECT_EQ(n.has_prev, next != m.live.begin()) << what << " " << e.seq;
      if (n.has_prev) {
        EXPECT_EQ(n.prev, std::prev(next)->first) << what << " " << e.seq;
        EXPECT_EQ(n.prev_gap, a - std::prev(next)->second) << what << " " << e.seq;
      }
      EXPECT_EQ(n.has_next, next != m.live.end()) << what << " " << e.seq;
      if (n.has_next) {
        EXPECT_EQ(n.next, next->first) << what << " " << e.seq;
        EXPECT_EQ(n.next_gap, next->first - end) << what << " " << e.seq;
      }
      EXPECT_EQ(n.first_page, a / kLayoutPage * kLayoutPage);
      EXPECT_EQ(n.last_page, (end - 1) / kLayoutPage * kLayoutPage);
      m.live[a] = end;
      m.ids[object] = a;
      m.id_at[a] = object;
      delta += m.add(a, end, +1);
      ++placed;
    }
    // Pages gained or given back: the page counts' word against the
    // analyzer's neighbour tests.
    if (n.kind != LayoutNote::Kind::none) {
      EXPECT_EQ(n.pages_delta, delta) << what << ": event " << e.seq;
    }
    peak = std::max(peak, m.pages);
  }
  layout.finish();
  EXPECT_EQ(failures, 0u) << what;
  EXPECT_EQ(layout.summary().overlaps, in_order ? reused : 0) << what;
  EXPECT_EQ(layout.summary().reused_early, reused) << what;
  if (early_reuse) *early_reuse = reused;
  EXPECT_EQ(layout.summary().unaddressed, 0u) << what;
  EXPECT_EQ(layout.summary().placed, placed) << what;
  EXPECT_EQ(layout.summary().pages, m.pages) << what;
  EXPECT_EQ(layout.summary().pages_peak, peak) << what;
  return peak;
}

class Layout : public ::testing::TestWithParam<std::string> {};

TEST_P(Layout, EveryAllocatorsAddressesAgreeWithTheModel) {
  for (const auto& [name, trace] : traces()) {
    const std::string out = (dir() / (name + "-" + GetParam() + ".hlt")).string();
    const auto r = run({kHeaplab, "replay", trace, "--allocator", GetParam(), "--emit-trace", out, "-q"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("heaplab: wrote " + out + ": "), std::string::npos) << r.err;
    // The same events as the trace replayed.
    auto a = heaplab::trace::TraceReader::open(trace);
    auto b = heaplab::trace::TraceReader::open(out);
    const std::vector<Event> ea = heaplab::trace::testutil::read_all(*a), eb = heaplab::trace::testutil::read_all(*b);
    ASSERT_EQ(ea.size(), eb.size());
    size_t differ = 0;
    for (size_t i = 0; i < ea.size(); ++i) differ += !(ea[i] == eb[i]);
    EXPECT_EQ(differ, 0u) << name;
    EXPECT_EQ(b->read_memory_events(), a->read_memory_events());
    uint64_t early = 0;
    const uint64_t peak = check_emitted(out, name + " on " + GetParam(), &early);
    if (name != "threads") {
      EXPECT_EQ(early, 0u) << name << " on " << GetParam();
    }
    // heaplab layout on the emitted trace says the same (measured as
    // recorded: no --allocator).
    const auto l = run({kHeaplab, "layout", out, "--json"});
    ASSERT_EQ(l.code, 0) << l.err;
    const json j = json::parse(l.out);
    ASSERT_EQ(j["allocators"].size(), 1u);
    EXPECT_EQ(j["allocators"][0]["name"], GetParam());
    EXPECT_EQ(j["allocators"][0]["layout"]["working_set_pages_peak"], peak);
    EXPECT_EQ(j["allocators"][0]["layout"]["overlapping_blocks"], 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Allocators, Layout, ::testing::ValuesIn(kAllocators), [](const auto& p) { return p.param; });

TEST(LayoutCommand, AllAllocatorsSideBySide) {
  const auto r = run(
      {kHeaplab, "layout", traces()["threads"], "--allocator", "all", "-o", (dir() / "threads-layout.json").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string& a : kAllocators) EXPECT_NE(r.out.find(a + ", by size class:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sharing a page with another thread"), std::string::npos);
  const json j = json::parse(slurp((dir() / "threads-layout.json").string()));
  ASSERT_EQ(j["allocators"].size(), 4u);
  for (const json& a : j["allocators"]) {
    EXPECT_EQ(a["layout"]["overlapping_blocks"], 0) << a["name"];
    EXPECT_EQ(a["layout"]["calls_without_address"], 0) << a["name"];
    // 2 producers x 3000 blocks, each freed by a consumer.
    EXPECT_GE(a["layout"]["blocks_placed"].get<uint64_t>(), 6000u) << a["name"];
    EXPECT_FALSE(a["layout"]["replayed_in_order"].get<bool>());
  }
  // In the trace's order (one replay thread), no block is ever placed on a
  // live one: the allocators are sound.
  const auto one = run({kHeaplab, "layout", traces()["threads"], "--allocator", "all", "--threads", "1", "--json"});
  ASSERT_EQ(one.code, 0) << one.err;
  const json in_order = json::parse(one.out);
  for (const json& a : in_order["allocators"]) {
    EXPECT_TRUE(a["layout"]["replayed_in_order"].get<bool>());
    EXPECT_EQ(a["layout"]["blocks_reused_early"], 0) << a["name"];
    EXPECT_EQ(a["layout"]["overlapping_blocks"], 0) << a["name"];
  }
}

// A stored replay (bzip2 on glibc, its addresses kept in the file): the
// annotated text and the summary, byte for byte.
TEST(LayoutCommand, AnnotatedTextIsGolden) {
  const std::string stored = kSrc + "/replay/testdata/layout/401.bzip2-glibc.hlt";
  auto r = run({kHeaplab, "layout", stored, "--annotate"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, slurp(kSrc + "/replay/testdata/layout/401.bzip2-glibc.annotated.txt"));
  r = run({kHeaplab, "layout", stored});
  ASSERT_EQ(r.code, 0) << r.err;
  // (The golden's first line names the file as the test gives it.)
  EXPECT_EQ(r.out, "layout of " + stored + slurp(kSrc + "/replay/testdata/layout/401.bzip2-glibc.summary.txt"));
  // cat shows the same lines, with their addresses, without the notes.
  r = run({kHeaplab, "cat", stored});
  ASSERT_EQ(r.code, 0) << r.err;
  std::string expected;
  std::istringstream golden(slurp(kSrc + "/replay/testdata/layout/401.bzip2-glibc.annotated.txt"));
  for (std::string line; std::getline(golden, line);) {
    line = line.substr(0, line.find(" # "));
    expected += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
  }
  EXPECT_EQ(r.out, expected);
  EXPECT_NE(r.out.find("1 t0 malloc(294649856) = #2 @0x"), std::string::npos) << r.out;
}

TEST(LayoutCommand, BadInputGivesOneLine) {
  const std::string t = traces()["bzip2"];
  auto r = run({kHeaplab, "replay", t, "--allocator", "all", "--emit-trace", (dir() / "x.hlt").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: replay: --emit-trace takes one allocator and one load mode (a trace holds one replay's "
            "addresses)\n");
  EXPECT_FALSE(fs::exists(dir() / "x.hlt"));
  r = run({kHeaplab, "layout", t, "--allocator", "glibc,jemalloc", "--annotate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: layout: --annotate takes one allocator and one load mode (the notes are one layout's)\n");
  r = run({kHeaplab, "layout"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "heaplab: error: layout: no trace given (heaplab layout TRACE --allocator NAME)\n");
  r = run({kHeaplab, "layout", t, "--allocator", "nosuch"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  // A truncated trace's ids have holes a rewritten trace cannot keep.
  const std::string img = slurp(traces()["threads"]);
  const std::string cut = (dir() / "cut.hlt").string();
  {
    std::ofstream f(cut, std::ios::binary);
    f.write(img.data(), std::streamsize(img.size() - 100));
  }
  r = run({kHeaplab, "replay", cut, "--emit-trace", (dir() / "cut-out.hlt").string(), "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "heaplab: error: replay: --emit-trace: " + cut +
                       ": needs a complete trace (this one is truncated, so its ids have holes a trace written again "
                       "cannot keep)\n");
  EXPECT_FALSE(fs::exists(dir() / "cut-out.hlt"));
  // A trace with addresses is measured as recorded: replay options need --allocator.
  const std::string stored = kSrc + "/replay/testdata/layout/401.bzip2-glibc.hlt";
  r = run({kHeaplab, "layout", stored, "--threads", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "heaplab: error: layout: " + stored +
                       " holds a replay's addresses, measured as recorded: --load and --threads are for a replay "
                       "(give --allocator to replay it again)\n");
  r = run({kHeaplab, "layout", stored, "--json", "--annotate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "heaplab: error: layout: --annotate or --json, not both (both go to standard output)\n");
  // An empty trace: an empty trace again, and an empty layout.
  const std::string empty = (dir() / "empty.hlt").string();
  ASSERT_EQ(run({kHeaplab, "import", "--from", "cmt-text", "/dev/null", "-o", empty}).code, 0);
  r = run({kHeaplab, "replay", empty, "--emit-trace", (dir() / "empty-out.hlt").string(), "-q"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir() / "empty-out.hlt"));
  r = run({kHeaplab, "layout", empty, "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["allocators"][0]["layout"]["blocks_placed"], 0);
}

}  // namespace
