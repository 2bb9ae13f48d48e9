// End-to-end tests of `heaplab replay`: traces captured from the victim
// programs (and traces written for the purpose) replayed on every allocator
// in both load modes, with and without folding threads; the result JSON is
// checked against `heaplab stats`' figures for the same trace.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sched.h>
#include <fcntl.h>
#include <sys/file.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/trace_stats.h"
#include "capture/format/trace_reader.h"
#include "capture/format/memory_available.h"
#include "capture/format/trace_writer.h"
#include "common/text.h"
#include "replay/launch.h"
#include "replay/plan.h"
#include "replay/run_testutil.h"

namespace {

namespace fs = std::filesystem;
using heaplab::trace::Event;
using heaplab::trace::Op;
using nlohmann::json;

const std::string kBin = HEAPLAB_TEST_BINARY_DIR;
const std::string kHeaplab = kBin + "/cli/heaplab";
std::string testdata(const std::string& name) {
  return std::string(HEAPLAB_TEST_SOURCE_DIR) + "/replay/testdata/" + name;
}

using heaplab::testutil::Outcome;
using heaplab::testutil::quote;
using heaplab::testutil::run;
using heaplab::testutil::slurp;

class ReplayTest : public ::testing::Test {
 protected:
  static fs::path dir() {
    static const fs::path d = [] {
      fs::path p = fs::temp_directory_path() / ("heaplab_replay_test." + std::to_string(getpid()));
      fs::create_directories(p);
      return p;
    }();
    return d;
  }

  // A trace captured once per test program run: `victim_cpp ARGS`.
  static std::string captured(const std::string& name, const std::vector<std::string>& victim_args) {
    static std::map<std::string, std::string> cache;
    if (auto it = cache.find(name); it != cache.end()) return it->second;
    const std::string out = (dir() / (name + ".hlt")).string();
    std::vector<std::string> cmd = {kHeaplab, "capture", "-q", "-o", out, "--", kBin + "/capture/testprogs/victim_cpp"};
    cmd.insert(cmd.end(), victim_args.begin(), victim_args.end());
    const Outcome r = run(cmd);
    EXPECT_EQ(r.code, 0) << r.err;
    return cache[name] = out;
  }
  static std::string producer_consumer() { return captured("threads", {"threads", "2", "2", "5000"}); }
  static std::string every_api() { return captured("api", {"api"}); }

  // Writes a trace of `events` (seq and ids assigned by the writer).
  static std::string write_trace(const std::string& name, std::vector<Event> events, bool times = true,
                                 const std::string& metadata = "{}") {
    const std::string path = (dir() / (name + ".hlt")).string();
    heaplab::trace::WriterOptions o;
    o.timestamps = times;
    o.metadata_json = metadata;
    heaplab::trace::TraceWriter w(path, o);
    for (Event& e : events) w.append(e);
    w.close();
    return path;
  }

  static json replay(const std::string& trace, const std::vector<std::string>& opts, int expect_code = 0,
                     const std::string& env = "") {
    const std::string out = (dir() / "result.json").string();
    fs::remove(out);
    std::vector<std::string> cmd = {kHeaplab, "replay", trace, "-q", "-o", out};
    cmd.insert(cmd.end(), opts.begin(), opts.end());
    const Outcome r = run(cmd, env);
    EXPECT_EQ(r.code, expect_code) << r.err;
    if (!fs::exists(out)) return json();
    return json::parse(slurp(out));
  }
};

// The scratch directory goes when every suite is done (suites share its traces).
class CleanUp : public ::testing::Environment {
 public:
  // Kept plans go to the scratch directory, not the user's cache.
  void SetUp() override {
    const fs::path plans = fs::temp_directory_path() / ("heaplab_replay_test." + std::to_string(getpid())) / "plans";
    setenv("HEAPLAB_PLAN_DIR", plans.c_str(), 1);
  }
  void TearDown() override {
    fs::remove_all(fs::temp_directory_path() / ("heaplab_replay_test." + std::to_string(getpid())));
  }
};
const auto* const kCleanUp = ::testing::AddGlobalTestEnvironment(new CleanUp);

// The calls of a trace per op name, as `heaplab stats` counts them (the
// markers that are not calls left out).
std::map<std::string, uint64_t> recorded_calls(const heaplab::analysis::TraceStats& s) {
  std::map<std::string, uint64_t> m;
  for (unsigned op = 0; op < heaplab::trace::kOpCount; ++op) {
    const auto o = static_cast<Op>(op);
    if (o == Op::thread_start || o == Op::thread_end || o == Op::lost || s.ops[op] == 0) continue;
    m[std::string(heaplab::trace::op_name(o))] = s.ops[op];
  }
  return m;
}

std::map<std::string, uint64_t> replayed_calls(const json& r) {
  std::map<std::string, uint64_t> m;
  for (const auto& [name, o] : r["replay"]["ops"].items()) m[name] = o["calls"].get<uint64_t>();
  return m;
}

// Calls for traces written for the purpose (the writer assigns ids in order).
Event malloc_ev(uint64_t size, uint64_t time = 0) {
  Event e{};
  e.op = Op::malloc;
  e.size = size;
  e.time = time;
  return e;
}
Event free_ev(uint64_t id, uint64_t time = 0) {
  Event e{};
  e.op = Op::free;
  e.old = id;
  e.time = time;
  return e;
}

// `threads` recorded threads, each starting, making an object and freeing
// the one the thread before made; each ends right after (`end_each`: they
// never run at once) or all at the end (thread_start and thread_end
// markers; times 1, 2, 3 ...).
std::vector<Event> thread_chain(uint32_t threads, bool end_each) {
  std::vector<Event> ev;
  uint64_t time = 0;
  auto add = [&](Event e, uint32_t thread) {
    e.thread = thread;
    e.time = ++time;
    ev.push_back(e);
  };
  Event start{}, end{};
  start.op = Op::thread_start;
  end.op = Op::thread_end;
  for (uint32_t t = 0; t < threads; ++t) {
    add(start, t);
    add(malloc_ev(16 + t % 64), t);  // object t + 1
    if (t > 0) add(free_ev(t), t);   // the thread before's object
    if (end_each) add(end, t);
  }
  if (!end_each)
    for (uint32_t t = 0; t < threads; ++t) add(end, t);
  return ev;
}

// A capture of several threads normalised before every thread took one
// shim-cost correction (no capture.time_correction) is said to replay in
// bursts at the recorded pace; one normalised since (the producer-consumer
// capture), a trace of one thread, a trace no shim cost was taken off, and
// a replay at full speed are not.
TEST_F(ReplayTest, OldPerThreadTimesAreSaidAtTheRecordedPace) {
  const auto said = [](const json& r) {
    if (!r.contains("warnings")) return false;
    for (const auto& w : r["warnings"])
      if (w.get<std::string>().find("shim's cost taken off thread by thread") != std::string::npos) return true;
    return false;
  };
  const std::string old = write_trace("old_times", thread_chain(2, true), true, R"({"capture":{"shim_cost_ns":500}})");
  const json r = replay(old, {"--timing", "recorded", "--no-memory"});
  EXPECT_TRUE(said(r)) << r.dump();
  EXPECT_FALSE(said(replay(old, {"--no-memory"})));
  EXPECT_FALSE(
      said(replay(write_trace("old_times_one", thread_chain(1, true), true, R"({"capture":{"shim_cost_ns":500}})"),
                  {"--timing", "recorded", "--no-memory"})));
  EXPECT_FALSE(said(replay(write_trace("imported_times", thread_chain(2, true), true, "{}"),
                           {"--timing", "recorded", "--no-memory"})));
  EXPECT_FALSE(said(replay(write_trace("new_times", thread_chain(2, true), true,
                                       R"({"capture":{"shim_cost_ns":500,"time_correction":"largest_thread_cost"}})"),
                           {"--timing", "recorded", "--no-memory"})));
  EXPECT_FALSE(said(replay(write_trace("no_cost", thread_chain(2, true), true, R"({"capture":{"shim_cost_ns":0}})"),
                           {"--timing", "recorded", "--no-memory"})));
  // A capture made now: several threads, a shim cost, the field.
  const std::string now = producer_consumer();
  const json meta = json::parse(run({kHeaplab, "cat", "--meta", now}).out)["capture"];
  ASSERT_GT(meta["threads"].get<int>(), 1);
  ASSERT_GT(meta["shim_cost_ns"].get<uint64_t>(), 0u);
  ASSERT_EQ(meta["time_correction"], "largest_thread_cost");
  EXPECT_FALSE(said(replay(now, {"--timing", "recorded", "--no-memory"})));
  // The summary prints it.
  const Outcome text = run({kHeaplab, "replay", old, "--timing", "recorded", "--no-memory"});
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("warning: the trace's times had the shim's cost taken off thread by thread"),
            std::string::npos)
      << text.out;
  // An experiment (recorded timing by default) says it once for the trace,
  // not once a run.
  const fs::path yaml = dir() / "old_times.yaml";
  std::ofstream(yaml) << "traces: [{name: old, file: " << old
                      << "}]\nallocators: [{name: glibc, label: a}, {name: glibc, label: b}]\n"
                      << "repetitions: 2\n"
                      << "warmup: 0\n";
  const Outcome ran = run({kHeaplab, "run", yaml.string(), "--results", (dir() / "old_times_results").string()});
  EXPECT_EQ(ran.code, 0) << ran.err;
  const std::string line = "heaplab: warning: trace 'old': the trace's times had the shim's cost taken off";
  const size_t at = ran.err.find(line);
  EXPECT_NE(at, std::string::npos) << ran.err;
  EXPECT_EQ(ran.err.find(line, at + 1), std::string::npos) << ran.err;
}

// --- Faithfulness on every allocator, both load modes, folded or not -------

struct Case {
  std::string allocator, load;
  int threads;  // 0: one per recorded thread
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return i.param.allocator + "_" + i.param.load + "_" +
         (i.param.threads ? "fold" + std::to_string(i.param.threads) : "unfolded");
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.allocator << "/" << c.load << "/threads=" << c.threads; }

class Faithful : public ReplayTest, public ::testing::WithParamInterface<Case> {};

// A producer/consumer capture (2 producers, 2 consumers, almost every free on
// another thread) replays exactly: every recorded call once, the same peak
// of live requested bytes as `heaplab stats`, and the allocator identified.
TEST_P(Faithful, ProducerConsumerReplaysExactly) {
  const Case c = GetParam();
  const std::string t = producer_consumer();
  const auto stats = heaplab::analysis::compute_stats(*heaplab::trace::TraceReader::open(t));
  std::vector<std::string> opts = {"--allocator", c.allocator, "--load", c.load};
  if (c.threads) opts.insert(opts.end(), {"--threads", std::to_string(c.threads)});
  const json r = replay(t, opts);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["exit"]["status"], "ok");
  EXPECT_TRUE(r["replay"]["faithful"].get<bool>());
  EXPECT_EQ(replayed_calls(r), recorded_calls(stats));
  EXPECT_EQ(r["trace"]["live_bytes_peak"].get<uint64_t>(), stats.live_bytes.value);
  EXPECT_EQ(r["trace"]["recorded_threads"].get<uint32_t>(), stats.threads);
  // (Recorded threads that never ran at once share a replay thread.)
  EXPECT_EQ(r["replay_threads"].get<size_t>(),
            heaplab::replay::fold_threads(*heaplab::trace::TraceReader::open(t), uint32_t(c.threads)).size());
  // 5 recorded threads on this 2-CPU machine: said, not hidden.
  const int cpus = r["replay"]["environment"]["cpus_allowed"].get<int>();
  EXPECT_EQ(r.contains("warnings"), r["replay_threads"].get<int>() > cpus);
  EXPECT_EQ(r["replay"]["replay_threads"].get<uint32_t>(), r["replay_threads"].get<uint32_t>());
  EXPECT_EQ(r["allocator"]["load"], c.load);
  for (const auto& [name, o] : r["replay"]["ops"].items()) {
    EXPECT_EQ(o["null_results"].get<uint64_t>(), 0u) << name;
    EXPECT_EQ(o["unexpected_results"].get<uint64_t>(), 0u) << name;
  }
  const std::string version = r["allocator"].value("version", "");
  const std::string library = r["allocator"].value("library", "");
  const std::map<std::string, std::pair<std::string, std::string>> expect = {
      {"glibc", {"glibc ", "libc.so"}},
      {"jemalloc", {"jemalloc ", "libjemalloc.so"}},
      {"mimalloc", {"mimalloc ", "libmimalloc.so"}},
      {"tcmalloc", {"gperftools ", "libtcmalloc.so"}}};
  EXPECT_EQ(version.rfind(expect.at(c.allocator).first, 0), 0u) << version;
  EXPECT_NE(library.find(expect.at(c.allocator).second), std::string::npos) << library;
  EXPECT_EQ(r["allocator"].value("build_id", "").size(), 40u);
  EXPECT_FALSE(r["replay"]["allocator_stats"].empty());
  EXPECT_GE(r["replay"]["environment"]["cpus_online"].get<int>(), 1);
  EXPECT_FALSE(r["replay"]["environment"].value("kernel", "").empty());
  // Most frees are cross-thread; folding onto one thread leaves none. (On
  // two, how many stay cross-thread depends on which recorded threads the
  // fold puts together, which depends on this capture's event counts.)
  const uint64_t cross = r["trace"]["cross_thread_consumes"].get<uint64_t>();
  if (c.threads == 1) {
    EXPECT_EQ(cross, 0u);
  } else if (c.threads == 0 && !r["trace"]["threads_one_after_another"].get<bool>()) {
    EXPECT_GT(cross, stats.objects_freed / 2);
  } else {  // (a producer that ended before its consumer started: on one replay thread)
    EXPECT_LE(cross, stats.objects_freed);
  }
}

// Every allocation API (the capture test's list, with failures such as
// malloc(SIZE_MAX) and a throwing new that fails) replays call for call.
TEST_P(Faithful, EveryApiReplaysExactly) {
  const Case c = GetParam();
  if (c.threads) GTEST_SKIP() << "single-threaded trace";
  const std::string t = every_api();
  const auto stats = heaplab::analysis::compute_stats(*heaplab::trace::TraceReader::open(t));
  const json r = replay(t, {"--allocator", c.allocator, "--load", c.load});
  ASSERT_TRUE(r.is_object());
  EXPECT_TRUE(r["replay"]["faithful"].get<bool>());
  EXPECT_EQ(replayed_calls(r), recorded_calls(stats));
  EXPECT_EQ(r["trace"]["live_bytes_peak"].get<uint64_t>(), stats.live_bytes.value);
  // jemalloc has no pvalloc or reallocarray of its own: the replay builds
  // them from its memalign and realloc instead of letting glibc's answer.
  if (c.allocator == "jemalloc") {
    EXPECT_EQ(r["allocator"]["emulated"], json({"pvalloc", "reallocarray"}));
  }
  if (c.allocator == "glibc") {
    EXPECT_EQ(r["allocator"]["emulated"], json::array());
  }
  // Calls that failed in the trace fail here too: no result appears from
  // nowhere and no recorded result is missing.
  for (const auto& [name, o] : r["replay"]["ops"].items()) {
    EXPECT_EQ(o["null_results"].get<uint64_t>(), 0u) << name;
    if (name != "realloc") {
      EXPECT_EQ(o["unexpected_results"].get<uint64_t>(), 0u) << name;
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (const char* a : {"glibc", "jemalloc", "mimalloc", "tcmalloc"})
    for (const char* l : {"preload", "direct"})
      for (int t : {0, 1, 2}) v.push_back({a, l, t});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllAllocators, Faithful, ::testing::ValuesIn(all_cases()), case_name);

// --- An allocator that returns NULL, or crashes ------------------------------

// 50 blocks of 1 MiB and 50 of 100 bytes, all freed: with the test allocator
// refusing more than 500,000 bytes, exactly the 50 big mallocs get NULL, the
// replay goes on, and their frees receive NULL.
std::vector<Event> big_and_small() {
  std::vector<Event> ev;
  for (int i = 0; i < 100; ++i) ev.push_back(malloc_ev(i % 2 ? 100 : 1 << 20, uint64_t(i) * 1000));
  for (uint64_t id = 1; id <= 100; ++id) ev.push_back(free_ev(id, 100000 + id * 1000));
  return ev;
}

// More threads than a process can start here (vm.max_map_count's 65,530
// mappings allow about 32,000): refused at once, with what to do, before a
// plan is built (the plan of 2^20 threads took 10 GB and 39 s, then failed
// at thread 32,448).
TEST_F(ReplayTest, MoreThreadsThanTheMachineStartsIsOneLineAtOnce) {
  std::ifstream maps("/proc/sys/vm/max_map_count");
  uint64_t max_maps = 0;
  if (!(maps >> max_maps) || max_maps > 1000000) GTEST_SKIP() << "vm.max_map_count is " << max_maps;
  const uint32_t threads = uint32_t(max_maps / 2 + 100);
  std::vector<Event> ev;
  for (uint32_t t = 0; t < threads; ++t) {
    Event e = malloc_ev(16);
    e.thread = t;
    ev.push_back(e);
  }
  const std::string trace = write_trace("too_many_threads", ev, false);
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome r = run({kHeaplab, "replay", trace, "-q"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.find("heaplab: error: replay: " + trace + ": the replay would start "), 0u) << r.err;
  EXPECT_NE(r.err.find(" threads (one per recorded thread) and a process here can start about "), std::string::npos);
  EXPECT_NE(r.err.find("(vm.max_map_count, kernel.threads-max and pid_max, the cgroup's pids.max, ulimit -u): fold "
                       "them with --threads "),
            std::string::npos);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Folded, it replays.
  const Outcome f = run({kHeaplab, "replay", trace, "-q", "--threads", "8", "--no-memory"});
  EXPECT_EQ(f.code, 0) << f.err;
}

// ulimit -u counts every task of the user, not only the replay's. As user
// nobody (setpriv, where this runs as root), with `sleeps` of nobody's
// processes running besides the shell and heaplab, under prlimit --nproc:
// a replay that cannot start its threads is refused at once (it was
// compared with the limit alone, and the replay then failed starting its
// threads, or its plan pager), and one that fits replays.
TEST_F(ReplayTest, UlimitUCountsTheUsersOtherTasks) {
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0 || access("/usr/bin/prlimit", X_OK) != 0)
    GTEST_SKIP() << "needs root, setpriv and prlimit";
  const fs::path open_dir = dir() / "for_nobody";
  fs::create_directories(open_dir);
  fs::permissions(open_dir, fs::perms::all);
  fs::permissions(dir(), fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
  auto trace_of = [&](uint32_t threads) {
    std::vector<Event> ev;
    for (uint32_t t = 0; t < threads; ++t) {
      Event e = malloc_ev(16);
      e.thread = t;
      ev.push_back(e);
    }
    const std::string name = "threads_" + std::to_string(threads);
    const std::string trace = (open_dir / (name + ".hlt")).string();
    fs::copy_file(write_trace(name, ev, false), trace, fs::copy_options::overwrite_existing);
    fs::permissions(trace, fs::perms::all);
    return trace;
  };
  auto replay = [&](const std::string& trace, int sleeps, int nproc) {
    const std::string script =
        "for i in $(seq " + std::to_string(sleeps) +
        "); do sleep 30 >/dev/null 2>&1 & p=\"$p $!\"; done; HEAPLAB_PLAN_DIR=" + open_dir.string() +
        "/plans prlimit --nproc=" + std::to_string(nproc) +
        " \"$0\" replay \"$1\" -q --no-memory; s=$?; kill $p; wait; exit $s";
    return run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c", script,
                kHeaplab, trace});
  };
  // nobody's tasks: the shell, the sleeps and heaplab; the replayer's main
  // thread, plan pager and sampler besides its replay threads.
  const std::string thirty = trace_of(30), three = trace_of(3);
  Outcome r = replay(thirty, 40, 60);  // 60 - 42 - 3 = 15 threads
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err, "heaplab: error: replay: " + thirty +
                       ": the replay would start 30 threads (one per recorded thread) and a process here can start "
                       "about 15 (vm.max_map_count, kernel.threads-max and pid_max, the cgroup's pids.max, ulimit "
                       "-u): fold them with --threads 13 or fewer\n");
  r = replay(three, 10, 16);  // 16 - 12 - 3 = 1 (was taken for 3: then the plan pager could not start)
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(": the replay would start 3 threads (one per recorded thread) and a process here can start "
                       "about 1 ("),
            std::string::npos)
      << r.err;
  r = replay(three, 10, 15);  // none
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err, "heaplab: error: replay: " + three +
                       ": no replay thread can start here: the tasks running now reach a limit (vm.max_map_count, "
                       "kernel.threads-max and pid_max, the cgroup's pids.max, or ulimit -u with this user's other "
                       "tasks); end some of them, or raise the limit\n");
  r = replay(three, 10, 18);  // exactly enough: 18 - 12 - 3 = 3
  EXPECT_EQ(r.code, 0) << r.err;
}

// Two thousand recorded threads, each started after the one before had
// ended (thread_end), each freeing the object the one before made: replayed
// as the program ran them, one after another on one replay thread, each on
// a thread of its own started once the one before has exited. With a replay
// thread each (--threads 2000), none is started on the way. Where no thread
// can start (ulimit -u, as a user of its own under prlimit), the one before
// goes on, and the replay is as faithful.
TEST_F(ReplayTest, ThreadsThatComeAndGoRunAsTheyRan) {
  constexpr uint32_t kThreads = 2000;
  const std::vector<Event> ev = thread_chain(kThreads, true);
  const fs::path open_dir = dir() / "come_and_go";
  fs::create_directories(open_dir);
  fs::permissions(open_dir, fs::perms::all);
  const std::string trace = (open_dir / "come_and_go.hlt").string();
  fs::copy_file(write_trace("come_and_go", ev, true, R"({"capture":{"thread_ends":"found_gone"}})"), trace,
                fs::copy_options::overwrite_existing);
  fs::permissions(trace, fs::perms::all);
  const auto faithful = [&](const json& r) {
    EXPECT_EQ(r["replay"]["ops"]["malloc"]["calls"], kThreads);
    EXPECT_EQ(r["replay"]["ops"]["free"]["calls"], kThreads - 1);
    EXPECT_EQ(r["replay"]["faithful"], true);
    EXPECT_EQ(r["exit"]["status"], "ok");
  };
  json r = replay(trace, {"--no-memory"});
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["replay_threads"], 1u);
  EXPECT_EQ(r["trace"]["recorded_threads"], kThreads);
  EXPECT_EQ(r["trace"]["threads_one_after_another"], true);
  EXPECT_EQ(r["trace"]["new_thread_steps"], kThreads - 1);
  EXPECT_EQ(r["replay"]["threads_started"]["count"], kThreads - 1);
  EXPECT_EQ(r["replay"]["threads_started"]["not_started"], 0u);
  EXPECT_EQ(r["thread_map"].size(), 1u);
  EXPECT_EQ(r["thread_map"][0].size(), kThreads);
  faithful(r);

  // Latency samples and the snapshot at the live peak go on across the
  // threads (the histograms and countdown are the replay thread's; the
  // pause may fall at a kStepNewThread).
  r = replay(trace, {"--latency", "1"});
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["replay"]["latency"]["ops"]["malloc"]["samples"], kThreads);
  EXPECT_EQ(r["replay"]["latency"]["ops"]["free"]["samples"], kThreads - 1);
  EXPECT_EQ(r["replay"]["memory"]["at_live_peak_source"], "snapshot right after the trace's live-peak call");
  EXPECT_EQ(r["replay"]["threads_started"]["count"], kThreads - 1);
  faithful(r);

  r = replay(trace, {"--no-memory", "--threads", std::to_string(kThreads)});
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["replay_threads"], kThreads);
  EXPECT_EQ(r["trace"]["threads_one_after_another"], false);
  EXPECT_EQ(r["replay"]["threads_started"]["count"], 0u);
  faithful(r);

  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0 || access("/usr/bin/prlimit", X_OK) != 0) return;
  // A user of its own (uid 65533: not nobody, whose tasks other tests
  // count): its tasks are the shell, 10 sleeps, heaplab, and the replayer's
  // main thread, plan pager and memory sampler: 16 leaves room for the
  // replay thread, none for the next.
  const std::string out = (open_dir / "nobody.json").string();
  const std::string script =
      "for i in $(seq 10); do sleep 30 >/dev/null 2>&1 & p=\"$p $!\"; done; HEAPLAB_PLAN_DIR=" + open_dir.string() +
      "/plans prlimit --nproc=16 \"$0\" replay \"$1\" -q -o " + out + "; s=$?; kill $p; wait; exit $s";
  const Outcome o = run({"/usr/bin/setpriv", "--reuid=65533", "--regid=65533", "--clear-groups", "/bin/sh", "-c",
                         script, kHeaplab, trace});
  ASSERT_EQ(o.code, 0) << o.err;
  r = json::parse(slurp(out));
  EXPECT_EQ(r["replay_threads"], 1u);
  EXPECT_EQ(r["replay"]["threads_started"]["count"], 0u);
  EXPECT_EQ(r["replay"]["threads_started"]["not_started"], kThreads - 1);
  faithful(r);
}

// Ten thousand recorded threads, each freeing an object the one before it
// made: a replay thread each, all started (asleep until the start, not
// spinning: start-up was quadratic in threads), every call replayed.
TEST_F(ReplayTest, TenThousandThreads) {
  constexpr uint32_t kThreads = 10000;
  const std::vector<Event> ev = thread_chain(kThreads, false);
  const std::string trace = write_trace("ten_thousand_threads", ev);
  const json r = replay(trace, {"--no-memory"});
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["replay_threads"], kThreads);
  EXPECT_EQ(r["replay"]["ops"]["malloc"]["calls"], kThreads);
  EXPECT_EQ(r["replay"]["ops"]["free"]["calls"], kThreads - 1);
  EXPECT_EQ(r["exit"]["status"], "ok");
}

// Calls undefined for allocators (a sized delete of the wrong size, an
// aligned delete of the wrong alignment, alignment 3) crashed jemalloc and
// mimalloc: replayed with the object's own size and alignment, counted, and
// warned about, on every allocator and load mode.
TEST_F(ReplayTest, UndefinedSizesAndAlignmentsAreCorrected) {
  std::vector<Event> ev;
  Event newed = malloc_ev(100, 1);
  newed.op = Op::op_new;
  ev.push_back(newed);
  Event a3 = malloc_ev(64, 2);
  a3.op = Op::aligned_alloc;
  a3.align = 3;
  ev.push_back(a3);
  Event a64 = malloc_ev(48, 3);
  a64.op = Op::op_new_aligned;
  a64.align = 64;
  ev.push_back(a64);
  Event sized = free_ev(1, 4);
  sized.op = Op::op_delete_sized;
  sized.size = 1 << 30;
  ev.push_back(sized);
  ev.push_back(free_ev(2, 5));
  Event adel = free_ev(3, 6);
  adel.op = Op::op_delete_aligned;
  adel.align = 4096;
  ev.push_back(adel);
  // posix_memalign with 3 and with 2 (a power of two, below a pointer): it
  // fails with EINVAL on every allocator; an imported log says they
  // succeeded: replayed with 8.
  for (uint64_t align : {3, 2}) {
    Event pm = malloc_ev(100, ev.size() + 1);
    pm.op = Op::posix_memalign;
    pm.align = align;
    ev.push_back(pm);
  }
  ev.push_back(free_ev(4, 9));
  ev.push_back(free_ev(5, 10));
  const std::string t = write_trace("undefined_sizes", ev);
  for (const char* alloc : {"glibc", "jemalloc", "mimalloc", "tcmalloc"}) {
    for (const char* load : {"preload", "direct"}) {
      SCOPED_TRACE(std::string(alloc) + " " + load);
      const json r = replay(t, {"--allocator", alloc, "--load", load});
      ASSERT_TRUE(r.is_object());
      EXPECT_EQ(r["exit"]["status"], "ok");
      EXPECT_EQ(r["trace"]["sizes_corrected"], 1);
      EXPECT_EQ(r["trace"]["alignments_corrected"], 4);
      EXPECT_TRUE(r["replay"]["faithful"].get<bool>()) << r["replay"].dump();
      ASSERT_TRUE(r.contains("warnings"));
      EXPECT_NE(r["warnings"].dump().find("undefined for allocators"), std::string::npos);
    }
  }
}

TEST_F(ReplayTest, NullResultsAreRecordedNotACrash) {
  const std::string t = write_trace("big_and_small", big_and_small());
  for (const char* load : {"preload", "direct"}) {
    SCOPED_TRACE(load);
    const json r = replay(t, {"--allocator", TEST_ALLOC_NULL, "--load", load}, 0, "HEAPLAB_TEST_NULL_ABOVE=500000");
    ASSERT_TRUE(r.is_object());
    EXPECT_EQ(r["replay"]["ops"]["malloc"]["calls"], 100);
    EXPECT_EQ(r["replay"]["ops"]["malloc"]["null_results"], 50);
    EXPECT_EQ(r["replay"]["ops"]["free"]["calls"], 100);
    EXPECT_TRUE(r["replay"]["calls_match"].get<bool>());
    EXPECT_FALSE(r["replay"]["results_match"].get<bool>());
    EXPECT_FALSE(r["replay"]["faithful"].get<bool>());
    EXPECT_EQ(r["exit"]["status"], "ok");
  }
  // An allocator that also refuses the replayer's own memory (every request,
  // or those of its sizes): preloaded, the replayer runs on it, and says so
  // in one line (it was std::bad_alloc, or SIGABRT where the runtime could
  // not even make the exception); loaded directly, the NULLs are counted.
  for (const char* above : {"0", "16", "1000"}) {
    SCOPED_TRACE(above);
    const std::string out = (dir() / "null.json").string();
    const Outcome o = run({kHeaplab, "replay", t, "-q", "--allocator", TEST_ALLOC_NULL, "-o", out},
                          std::string("HEAPLAB_TEST_NULL_ABOVE=") + above);
    EXPECT_EQ(o.code, 1) << o.err;
    EXPECT_EQ(o.err,
              std::string("heaplab: error: replay: malloc returned NULL for the replayer's own memory (with --load "
                          "preload the replayer runs on the allocator it replays: the trace's NULL results are "
                          "counted, but the replayer cannot run without memory of its own; --load direct keeps its "
                          "memory apart)\n"));
    const json d = replay(t, {"--allocator", TEST_ALLOC_NULL, "--load", "direct"}, 0,
                          std::string("HEAPLAB_TEST_NULL_ABOVE=") + above);
    ASSERT_TRUE(d.is_object());
    EXPECT_EQ(d["replay"]["ops"]["malloc"]["calls"], 100);
    EXPECT_EQ(d["exit"]["status"], "ok");
  }
}

// A custom library loaded directly: what it lacks is built from what it has,
// and the result says which.
TEST_F(ReplayTest, CustomLibraryDirectNamesEmulatedFunctions) {
  const json r = replay(every_api(), {"--allocator", TEST_ALLOC_NULL, "--load", "direct"});
  ASSERT_TRUE(r.is_object());
  EXPECT_TRUE(r["replay"]["faithful"].get<bool>());
  const auto emulated = r["allocator"]["emulated"].get<std::vector<std::string>>();
  EXPECT_EQ(emulated, (std::vector<std::string>{"reallocarray", "valloc", "pvalloc"}));
}

TEST_F(ReplayTest, CrashingAllocatorIsReportedWithTheSignal) {
  const std::string out = (dir() / "crash.json").string();
  const Outcome r = run({kHeaplab, "replay", producer_consumer(), "-q", "--allocator", TEST_ALLOC_NULL, "-o", out},
                        "HEAPLAB_TEST_ABORT_AT=2000");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, std::string("heaplab: error: replay: the replayer was killed by SIGABRT (on allocator '") +
                       TEST_ALLOC_NULL + "', preload)\n");
  const json j = json::parse(slurp(out));
  EXPECT_EQ(j["exit"]["status"], "crashed");
  EXPECT_EQ(j["exit"]["signal_name"], "SIGABRT");
  EXPECT_FALSE(j.contains("replay"));
}

TEST_F(ReplayTest, HungAllocatorIsKilledAtTheTimeout) {
  const std::string out = (dir() / "hang.json").string();
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome r =
      run({kHeaplab, "replay", producer_consumer(), "-q", "--allocator", TEST_ALLOC_NULL, "--timeout", "2", "-o", out},
          "HEAPLAB_TEST_HANG_AT=2000");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, std::string("heaplab: error: replay: the replay did not finish within 2 s on allocator '") +
                       TEST_ALLOC_NULL + "' (preload): killed (a hung allocator? --timeout sets the limit)\n");
  EXPECT_LT(took, 30.0);
  const json j = json::parse(slurp(out));
  EXPECT_EQ(j["exit"]["status"], "timeout");
  EXPECT_EQ(j["exit"]["after_s"], 2.0);
}

// The sampler's longest interval (an hour) does not hold the end of a
// short replay: stop() wakes it (before, it slept out its interval, and
// this replay was killed at its timeout).
TEST_F(ReplayTest, LongSampleIntervalDoesNotHoldTheEnd) {
  const json r = replay(producer_consumer(), {"--sample-ms", "3600000", "--timeout", "60"});
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["exit"]["status"], "ok") << r["exit"].dump();
  EXPECT_TRUE(r["replay"]["faithful"].get<bool>());
}

// --- Bad input: one line, non-zero exit -------------------------------------

TEST_F(ReplayTest, BadInputGivesOneLine) {
  const std::string t = producer_consumer();
  const std::string bad_so = (dir() / "bad.so").string();
  std::ofstream(bad_so) << "not a library\n";
  const std::string not_trace = (dir() / "not_trace.hlt").string();
  std::ofstream(not_trace) << "not a trace at all, just text\n";
  const std::string corrupt = (dir() / "corrupt.hlt").string();
  {
    std::string bytes = slurp(t);
    for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 16; ++i) bytes[i] ^= 0x5a;
    std::ofstream(corrupt, std::ios::binary) << bytes;
  }
  const std::string untimed = write_trace("untimed", big_and_small(), false);
  struct Bad {
    std::vector<std::string> args;
    std::string prefix;  // the one line starts with this
  };
  const std::vector<Bad> cases = {
      {{t, "--allocator", "glibc,jemalloc,glibc"},
       "heaplab: error: replay: --allocator: 'glibc' named twice in 'glibc,jemalloc,glibc'"},
      {{t, "--latency", "99999999999999999999"}, "heaplab: error: replay: --latency: at most 1073741824"},
      {{t, "--allocator", "nosuch"},
       "heaplab: error: replay: allocator 'nosuch': unknown name (known: glibc, jemalloc, mimalloc, "
       "tcmalloc; or give the path of a .so)"},
      {{t, "--allocator", bad_so},
       "heaplab: error: replay: allocator '" + bad_so + "': object '" + bad_so +
           "' from LD_PRELOAD cannot be preloaded (file too short): ignored."},
      {{t, "--allocator", bad_so, "--load", "direct"},
       "heaplab: error: replay: --load direct: cannot load it directly: " + bad_so +
           ": file too short (try --load preload)"},
      {{t, "--allocator", TEST_ALLOC_NOMALLOC},
       std::string("heaplab: error: replay: allocator '") + TEST_ALLOC_NOMALLOC + "': does not define malloc"},
      {{t, "--allocator", TEST_ALLOC_NOMALLOC, "--load", "direct"},
       std::string("heaplab: error: replay: --load direct: '") + TEST_ALLOC_NOMALLOC +
           "' does not define malloc, free and realloc itself"},
      {{(dir() / "missing.hlt").string()},
       "heaplab: error: replay: " + (dir() / "missing.hlt").string() + ": cannot open: No such file or directory"},
      {{not_trace}, "heaplab: error: replay: " + not_trace + ": offset 0: not a heaplab trace (bad magic)"},
      {{corrupt}, "heaplab: error: replay: " + corrupt + ": offset "},
      {{untimed, "--timing", "recorded"},
       "heaplab: error: replay: " + untimed + ": --timing recorded: the trace has no timestamps"},
      {{t, "--load", "sideways"}, "heaplab: error: replay: --load: expected preload, direct or both, not 'sideways'"},
      {{t, "--speed", "2"},
       "heaplab: error: replay: --speed paces a replay at the recorded pace: give --timing recorded too (a replay at "
       "--timing fast runs as fast as it can)"},
      {{t, "--membind", "near"},
       "heaplab: error: replay: --membind: expected none, local, interleave or a list of NUMA nodes such as 0,1, not "
       "'near'"},
      {{t, "--membind", "local"},
       "heaplab: error: replay: --membind local: binds memory to the nodes of the pinned CPUs; give --pin too"},
      {{t, "--membind", "999"}, "heaplab: error: replay: --membind: NUMA node 999 is not one this process may use"},
      {{t, "--allocator", "glibc,,jemalloc"},
       "heaplab: error: replay: --allocator: an empty name in 'glibc,,jemalloc'"},
      {{t, "--allocator", "glibc,nosuch"}, "heaplab: error: replay: allocator 'nosuch': unknown name"},
      {{t, "--pin", "sometimes"},
       "heaplab: error: replay: --pin: expected none, compact, scatter or a list of CPU numbers such as 0,2, "
       "not 'sometimes'"},
      {{t, "--pin", "4096"}, "heaplab: error: replay: --pin: CPU 4096 is not one this process may use (allowed: "},
      {{testdata("free_marked_failed.hlt")},
       "heaplab: error: replay: " + testdata("free_marked_failed.hlt") +
           ": inconsistent trace: event 1 (thread 0, free): flags on a call that returns nothing"},
      {{testdata("failed_realloc_with_result.hlt")},
       "heaplab: error: replay: " + testdata("failed_realloc_with_result.hlt") +
           ": inconsistent trace: event 1 (thread 0, realloc): a failed call with a result"},
      {{testdata("chunk_claims_4g_events.hlt")},
       "heaplab: error: replay: " + testdata("chunk_claims_4g_events.hlt") +
           ": offset 50: chunk claims 4294967295 events, more than a chunk can hold"},
      {{t, "--frobnicate"}, "heaplab: error: The following argument was not expected: --frobnicate"},
      {{}, "heaplab: error: replay: no trace given (heaplab replay TRACE --allocator NAME)"},
  };
  for (const Bad& b : cases) {
    std::vector<std::string> cmd = {kHeaplab, "replay"};
    cmd.insert(cmd.end(), b.args.begin(), b.args.end());
    const Outcome r = run(cmd);
    SCOPED_TRACE(b.prefix);
    EXPECT_EQ(r.code, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err.rfind(b.prefix, 0), 0u) << r.err;
    const size_t lines = size_t(std::count(r.err.begin(), r.err.end(), '\n'));
    // CLI11's parse errors add a usage hint line.
    EXPECT_EQ(lines, b.prefix.find("not expected") != std::string::npos ? 2u : 1u) << r.err;
  }
}

// The plan lives in a memfd, which counts against the file-size limit: past
// it, one line (not SIGXFSZ killing heaplab).
// `--allocator all` where no replay can start (the trace has no times for
// --timing recorded): an error, and the exit status says so; "skipped" is
// only for allocators that are not installed. What any allocator would be
// refused for is said once (it was said for each, with a table of failures).
TEST_F(ReplayTest, AllAllocatorsFailingIsNotSuccess) {
  const std::string untimed = write_trace("untimed_all", big_and_small(), false);
  for (const char* load : {"preload", "both"}) {
    const Outcome r =
        run({kHeaplab, "replay", untimed, "--allocator", "all", "--load", load, "--timing", "recorded", "-q"});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "heaplab: error: replay: " + untimed + ": --timing recorded: the trace has no timestamps\n");
  }
}

// Allocators named by hand must all run, in every load mode asked for,
// before any replay starts; with `all`, one whose replayer was not built is
// skipped without a "replaying on" line first.
TEST_F(ReplayTest, NamedAllocatorsAreCheckedInEveryLoadModeFirst) {
  const fs::path only = dir() / "only_base_replayer";
  fs::create_directories(only);
  fs::create_symlink(kBin + "/cli/heaplab-replay", only / "heaplab-replay");
  const std::string env = "HEAPLAB_REPLAYER_DIR=" + quote(only.string());
  const std::string out = (dir() / "named_both.json").string();
  Outcome r =
      run({kHeaplab, "replay", producer_consumer(), "--allocator", "glibc,jemalloc", "--load", "both", "-o", out}, env);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err,
            "heaplab: error: replay: jemalloc (direct): allocator 'jemalloc': direct load is not available: "
            "heaplab-replay-jemalloc was not built (install libjemalloc-dev and rebuild heaplab)\n");
  EXPECT_FALSE(fs::exists(out));
  r = run({kHeaplab, "replay", producer_consumer(), "--allocator", "all", "--load", "both", "-o", out}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* a : {"glibc", "jemalloc", "mimalloc", "tcmalloc"}) {
    EXPECT_NE(r.err.find(std::string("heaplab: replaying on ") + a + " (preload)\n"), std::string::npos) << r.err;
    const bool direct = std::string(a) == "glibc";
    EXPECT_EQ(r.err.find(std::string("heaplab: replaying on ") + a + " (direct)\n") != std::string::npos, direct)
        << a << "\n"
        << r.err;
    EXPECT_EQ(
        r.out.find(std::string("skipped: ") + a + "/direct: allocator '" + a +
                   "': direct load is not available: heaplab-replay-" + a + " was not built") != std::string::npos,
        !direct)
        << a << "\n"
        << r.out;
  }
}

// The trace id names a kept plan: it is the hash of the file the replay
// read, or none (then no plan is looked up or kept). A trace replaced (mv)
// or rewritten in place between the reader's open and the hash by name
// gave the other file's id to this file's plan.
TEST_F(ReplayTest, ATraceReplacedWhileReadNamesNoPlan) {
  const std::string t = write_trace("replaced", big_and_small(), false);
  const auto reader = heaplab::trace::TraceReader::open(t);
  const std::string id = heaplab::replay::file_id(t);
  ASSERT_EQ(id.size(), 16u);
  EXPECT_EQ(heaplab::replay::file_id(t, &reader->file_stamp()), id);
  std::vector<Event> other = big_and_small();
  other.push_back(malloc_ev(64));
  const std::string o = write_trace("replacement", other, false);
  fs::rename(o, t);
  EXPECT_EQ(heaplab::replay::file_id(t, &reader->file_stamp()), "");
  EXPECT_NE(heaplab::replay::file_id(t), "");
  // Rewritten in place: the same inode, its time and size changed.
  const auto again = heaplab::trace::TraceReader::open(t);
  std::ofstream(t, std::ios::binary | std::ios::app) << "x";
  EXPECT_EQ(heaplab::replay::file_id(t, &again->file_stamp()), "");
}

// A cache limit that is not a whole number of MiB is an error, before
// anything is built or found, not a limit read as far as it goes ("1e3"
// was 1, "5MiB" 5, "abc" 0 and "-1" none).
TEST_F(ReplayTest, APlanCacheLimitThatIsNotANumberIsOneLine) {
  const std::string t = write_trace("cache_limit", big_and_small(), false);
  const std::string plans = (dir() / "cache_limit_plans").string();
  for (const char* v : {"abc", "-1", "1e3", "5MiB", " 5", "99999999999999999999"}) {
    const Outcome r =
        run({kHeaplab, "replay", t, "-q"}, "HEAPLAB_PLAN_DIR=" + quote(plans) + " HEAPLAB_PLAN_CACHE_MIB=" + quote(v));
    EXPECT_EQ(r.code, 2) << v;
    EXPECT_EQ(r.err,
              "heaplab: error: replay: HEAPLAB_PLAN_CACHE_MIB: expected the MiB of kept plans as a whole number (0: "
              "keep none), not '" +
                  std::string(v) + "'\n");
  }
  const Outcome r =
      run({kHeaplab, "replay", t, "-q"}, "HEAPLAB_PLAN_DIR=" + quote(plans) + " HEAPLAB_PLAN_CACHE_MIB=0");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_empty(plans));
  // With a plan kept, to be found rather than built: refused all the same.
  EXPECT_EQ(run({kHeaplab, "replay", t, "-q"}, "HEAPLAB_PLAN_DIR=" + quote(plans)).code, 0);
  ASSERT_FALSE(fs::is_empty(plans));
  const Outcome found =
      run({kHeaplab, "replay", t, "-q"}, "HEAPLAB_PLAN_DIR=" + quote(plans) + " HEAPLAB_PLAN_CACHE_MIB=lots");
  EXPECT_EQ(found.code, 2) << found.err;
}

// Where the results go is checked before anything is built or replayed.
TEST_F(ReplayTest, AnUnwritableOutputIsRefusedFirst) {
  const std::string plans = (dir() / "plans_never_made").string();
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"-o", "/nonexistent-dir/r.json"},
                                                {"--emit-trace", "/nonexistent-dir/e.hlt"},
                                                {"-o", dir().string()},
                                                {"--allocator", "all", "-o", "/nonexistent-dir/r.json"}}) {
    std::vector<std::string> argv = {kHeaplab, "replay", producer_consumer(), "-q"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const Outcome r = run(argv, "HEAPLAB_PLAN_DIR=" + quote(plans));
    EXPECT_EQ(r.code, 2) << r.err;
    const std::string& path = extra.back();
    EXPECT_EQ(r.err, "heaplab: error: replay: " + std::string(extra[0] == "--emit-trace" ? "--emit-trace: " : "") +
                         "cannot write '" + path +
                         "': " + (path == dir().string() ? "is a directory" : "No such file or directory") + "\n");
    EXPECT_FALSE(fs::exists(plans)) << "a plan was built first";
  }
}

// `--allocator all` where every replay outlives its --timeout: each is
// killed and counted failed with a line of its own, and the exit status is 1.
TEST_F(ReplayTest, AllAllocatorsTimingOutIsNotSuccess) {
  const Outcome r = run({kHeaplab, "replay", producer_consumer(), "--allocator", "all", "--timeout", "0.001", "-q"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.find("skipped"), std::string::npos) << r.err;
  for (const char* a : {"glibc", "jemalloc", "mimalloc", "tcmalloc"})
    EXPECT_NE(r.err.find(std::string("the replay did not finish within 0.001 s on allocator '") + a +
                         "' (preload): killed (a hung allocator? --timeout sets the limit)\n"),
              std::string::npos)
        << a << "\n"
        << r.err;
}

// The default timeout: 2 minutes, plus 2 us a call, 4 s a GiB requested
// and twice the recorded duration of a paced replay.
TEST(ReplayTimeout, DefaultScalesWithTheTrace) {
  EXPECT_DOUBLE_EQ(heaplab::replay::default_timeout_s(0, 0, 0), 120.0);
  EXPECT_DOUBLE_EQ(heaplab::replay::default_timeout_s(100'000'000, 0, 0), 320.0);
  EXPECT_DOUBLE_EQ(heaplab::replay::default_timeout_s(0, uint64_t{10} << 30, 0), 160.0);
  EXPECT_DOUBLE_EQ(heaplab::replay::default_timeout_s(1'000'000'000, uint64_t{1} << 30, 3600.0),
                   120.0 + 2000.0 + 4.0 + 7200.0);
}

// The replayer's bookkeeping follows the live set, not the trace's length:
// two traces with the same live objects (thread 0 makes objects that thread
// 1 frees 2,000 objects later), one with 10 times the calls of the other,
// replay with bookkeeping (plan windows mapped, object table, the rest)
// within 10% of each other, while the plan itself is 10 times the size.
TEST_F(ReplayTest, BookkeepingDoesNotGrowWithTheTracesLength) {
  const auto events = [](uint64_t objects) {
    std::vector<Event> evs;
    const uint64_t lag = 2000;
    for (uint64_t i = 1; i <= objects + lag; ++i) {
      if (i <= objects) evs.push_back(malloc_ev(16 + i % 200));
      if (i > lag) {
        evs.push_back(free_ev(i - lag));
        evs.back().thread = 1;
      }
    }
    return evs;
  };
  json r[2];
  const uint64_t objects[2] = {50000, 500000};
  for (int k = 0; k < 2; ++k) {
    const std::string t = write_trace("length" + std::to_string(k), events(objects[k]), false);
    r[k] = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_WINDOW_STEPS=4096");
    ASSERT_TRUE(r[k].is_object());
    ASSERT_TRUE(r[k]["replay"]["faithful"].get<bool>());
    EXPECT_EQ(r[k]["trace"]["calls"].get<uint64_t>(), 2 * objects[k]);
    EXPECT_EQ(r[k]["replay"]["plan_windows"]["steps_per_window"].get<uint64_t>(), 4096u);
    EXPECT_GT(r[k]["replay"]["slot_handoffs"]["count"].get<uint64_t>(), 0u);
  }
  const auto book = [&](int k, const char* what) { return r[k]["replay"]["bookkeeping_bytes"][what].get<double>(); };
  EXPECT_GT(book(1, "plan_total"), 9 * book(0, "plan_total"));
  // At most 4 windows a thread, 24 bytes a step: what the pager may map,
  // and what it did map at most (which depends on its pace against the
  // replay threads': compared below by what it may map, so that a loaded
  // machine does not decide the test).
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(book(k, "plan_most"), 2 * 4 * 4096 * 24.0);
    EXPECT_LE(book(k, "plan"), book(k, "plan_most"));
  }
  EXPECT_LE(book(1, "object_table"), 8 * (2000 + 2 * 2 * 1024 + 2.0));
  const auto most = [&](int k) { return book(k, "total") - book(k, "plan") + book(k, "plan_most"); };
  EXPECT_NEAR(most(1), most(0), 0.1 * most(0))
      << r[0]["replay"]["bookkeeping_bytes"].dump() << " vs " << r[1]["replay"]["bookkeeping_bytes"].dump();
  // And measured, not only counted: the replayer's peak RSS (its heap, the
  // same live set, plus its bookkeeping and the plan pages it has mapped).
  const double rss0 = r[0]["replay"]["max_rss_kib"].get<double>(), rss1 = r[1]["replay"]["max_rss_kib"].get<double>();
  EXPECT_NEAR(rss1, rss0, 0.1 * rss0);
}

// A trace's memory records (MEMX) are read as the heap events go by, never
// all held: `stats`, `check` and a replay of a trace with 50 times the
// records peak within a few MiB of each other (before, every command held
// 144 bytes a record: 144 MB more for the second trace). Each command's
// peak is its largest process's (heaplab, or the replayer it waited for).
TEST_F(ReplayTest, MemoryRecordsAreNotHeldWhateverTheirNumber) {
  // 2,000 objects of 64 KiB made and freed, one at a time; a MiB mapped,
  // then touched and advised N/2 times each among the calls, every malloc
  // timed, and each object's resident pages (written by another program:
  // a spawned command's peak starts from this process's own).
  const auto write = [&](const std::string& name, uint64_t records) {
    const std::string path = (dir() / (name + ".hlt")).string();
    const Outcome w = run({kBin + "/capture/format/make_hostile_traces", "memory", path, std::to_string(records)});
    EXPECT_EQ(w.code, 0) << w.err;
    return path;
  };
  const std::string small = write("memx-small", 20000), large = write("memx-large", 1000000);
  // Runs heaplab ARGS; its exit code and peak resident set (KiB: its
  // largest process's, and no less than this process's own peak, which the
  // kernel counts for the child until it runs heaplab).
  const auto peak_of = [](std::vector<std::string> args) {
    args.insert(args.begin(), kHeaplab);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int err = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    int st = 0;
    rusage u{};
    if (err != 0 || wait4(pid, &st, 0, &u) != pid) return std::pair<int, long>{-1, 0};
    return std::pair<int, long>{WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), u.ru_maxrss};
  };
  long peak[2][3] = {};
  json r[2];
  int k = 0;
  for (const std::string& t : {small, large}) {
    const std::string out = (dir() / "memx-result.json").string();
    const auto [stats_code, stats_kib] = peak_of({"stats", t});
    const auto [check_code, check_kib] = peak_of({"check", t});
    const auto [replay_code, replay_kib] = peak_of({"replay", t, "-q", "--allocator", "glibc", "-o", out});
    EXPECT_EQ(stats_code, 0);
    EXPECT_EQ(check_code, 0);
    EXPECT_EQ(replay_code, 0);
    peak[k][0] = stats_kib;
    peak[k][1] = check_kib;
    peak[k][2] = replay_kib;
    r[k] = json::parse(slurp(out));
    EXPECT_TRUE(r[k]["replay"]["faithful"].get<bool>()) << r[k].dump();
    const Outcome stats = run({kHeaplab, "stats", t});
    EXPECT_EQ(stats.code, 0) << stats.err;
    const auto line = [&](const std::string& name) {  // as `stats` prints a count
      const std::string n = k == 0 ? "10,000" : "500,000";
      return "  " + name + std::string(38 - name.size(), ' ') + std::string(10 - n.size(), ' ') + n + "\n";
    };
    EXPECT_NE(stats.out.find(line("touch")), std::string::npos) << stats.out;
    EXPECT_NE(stats.out.find(line("madvise_dontneed")), std::string::npos);
    EXPECT_NE(stats.out.find("large blocks with their resident pages recorded: 2,000\n"), std::string::npos);
    EXPECT_NE(stats.out.find("calls timed inside the allocator in the program: 2,000\n"), std::string::npos);
    ++k;
  }
  // The replays made every call, touch and object touch the records say.
  EXPECT_EQ(r[1]["trace"]["program_latency"]["ops"]["malloc"]["samples"], 2000);
  EXPECT_EQ(r[0]["trace"]["program_latency"]["ops"]["malloc"]["samples"], 2000);
  const json& calls = r[1]["replay"]["memory_calls"];
  EXPECT_EQ(calls["touch_mapping"]["calls"].get<uint64_t>(), 500000u) << calls.dump();
  EXPECT_EQ(calls["madvise_dontneed"]["calls"].get<uint64_t>(), 500000u);
  EXPECT_EQ(calls["touch_object"]["calls"].get<uint64_t>(), 2000u);
  EXPECT_EQ(r[1]["trace"]["memory"]["objects_with_resident_pages"].get<uint64_t>(), 2000u);
  for (int c = 0; c < 3; ++c)
    EXPECT_LE(peak[1][c] - peak[0][c], 16 * 1024) << (c == 0   ? "stats"
                                                      : c == 1 ? "check"
                                                               : "replay")
                                                  << ", KiB: " << peak[0][c] << " then " << peak[1][c];
}

// A plan is kept on disk for the next command on the same trace content
// (replay/plan_store.h); with no room in the cache (HEAPLAB_PLAN_CACHE_MIB=0)
// it is built for the command alone and built again next time.
TEST_F(ReplayTest, PlanIsKeptForTheNextCommand) {
  const std::string plans = (dir() / "kept-plans").string();
  const std::string t = write_trace("kept", big_and_small(), false);
  const json a = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
  EXPECT_EQ(a["plan_source"], "built");
  EXPECT_EQ(a["plan_kept"], true);
  EXPECT_EQ(a["plan_dir"], plans);
  const json b = replay(t, {"--allocator", "jemalloc"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
  EXPECT_EQ(b["plan_source"], "kept");
  EXPECT_EQ(b["plan_reused"], true);
  EXPECT_TRUE(b["replay"]["faithful"].get<bool>());
  EXPECT_EQ(b["trace"]["live_bytes_peak"], a["trace"]["live_bytes_peak"]);
  EXPECT_EQ(b["trace"]["calls"], a["trace"]["calls"]);
  // Another plan option (fold onto one thread) is another plan.
  const json c = replay(t, {"--allocator", "glibc", "--threads", "1"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
  EXPECT_EQ(c["plan_source"], "built");
  int kept = 0;
  for (const auto& e : fs::directory_iterator(plans)) kept += e.path().extension() == ".plan";
  EXPECT_EQ(kept, 2);

  const std::string none = (dir() / "no-kept-plans").string();
  for (int i = 0; i < 2; ++i) {
    const json d = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_CACHE_MIB=0 HEAPLAB_PLAN_DIR=" + none);
    EXPECT_EQ(d["plan_source"], "built");
    EXPECT_EQ(d["plan_kept"], false);
    EXPECT_TRUE(d["replay"]["faithful"].get<bool>());
  }
  EXPECT_TRUE(fs::is_empty(none));
}

// A plan its file system cannot hold: built in memory for this command
// (as where the directory cannot be written), not a byte written there; and
// where it would take more than half the memory available too, one line
// naming the sizes and what to do, at once (from the trace's index, before
// anything is built), exit 2. "At once" is checked by what was done, not by
// a clock (a loaded CI machine's ASan build took 1.2 s to start and stop).
// Needs a 4 MiB tmpfs, mounted where that is allowed. Then with a kept plan
// of 1 MiB there: evicting it could not make the room, so it stays, and the
// line says so.
TEST_F(ReplayTest, NoRoomForThePlanIsOneLineAtOnce) {
  const fs::path tiny = dir() / "tiny";
  fs::create_directories(tiny);
  if (mount("heaplab-test", tiny.c_str(), "tmpfs", 0, "size=4m") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here: " << std::strerror(errno);
  struct statvfs before {};
  ASSERT_EQ(statvfs(tiny.c_str(), &before), 0);
  const std::string small = write_trace("no_room_small", big_and_small(), false);
  // 2,000,000 calls: a plan of about 46 MiB, more than half of 80 MiB.
  std::vector<Event> ev;
  for (uint64_t id = 1; id <= 1000000; ++id) {
    ev.push_back(malloc_ev(16));
    ev.push_back(free_ev(id));
  }
  const std::string t = write_trace("no_room", ev, false);
  const std::string env = "HEAPLAB_PLAN_DIR=" + tiny.string();
  const std::string out = (dir() / "no_room_memory.json").string();
  const Outcome m = run({kHeaplab, "replay", small, "-q", "--allocator", "glibc", "-o", out}, env);
  const std::string lean = env + " HEAPLAB_MEMORY_AVAILABLE=83886080";
  const Outcome r = run({kHeaplab, "replay", t, "-q", "--allocator", "glibc"}, lean);
  struct statvfs after {};
  ASSERT_EQ(statvfs(tiny.c_str(), &after), 0);
  const bool empty = fs::is_empty(tiny);
  // A kept plan (its summary beside it) of 1 MiB.
  const fs::path kept = tiny / "older-t0-untimed-v8.plan", kept_json = tiny / "older-t0-untimed-v8.json";
  std::ofstream(kept, std::ios::binary) << std::string(size_t{1} << 20, 'p');
  std::ofstream(kept_json) << "{}\n";
  const Outcome r2 = run({kHeaplab, "replay", t, "-q", "--allocator", "glibc"}, lean);
  const bool kept_left = fs::exists(kept) && fs::exists(kept_json);
  umount(tiny.c_str());
  EXPECT_TRUE(empty);
  EXPECT_EQ(after.f_bfree, before.f_bfree);
  EXPECT_TRUE(kept_left) << "a kept plan was evicted for a build refused all the same";
  // In memory: the replay ran, and its result says where the plan was.
  EXPECT_EQ(m.code, 0) << m.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(j["plan_dir"].get<std::string>().rfind("memory (" + tiny.string() + " has ", 0), 0u) << j["plan_dir"];
  EXPECT_NE(j["plan_dir"].get<std::string>().find(" MiB free; the plan needs "), std::string::npos) << j["plan_dir"];
  // Exit 2 and one line: the room needed, and what the file system has.
  const auto refused = [&](const Outcome& o, const std::string& has) {
    EXPECT_EQ(o.code, 2);
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(t + ": the replay plan needs "), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(" MiB on disk and 512.0 MiB left free beside it, and " + tiny.string() + " has " + has +
                         "; held in memory instead it would take more than half of the 80.0 MiB available (set "
                         "HEAPLAB_PLAN_DIR to a file system with more room, or replay a shorter trace)\n"),
              std::string::npos)
        << o.err;
  };
  refused(r, "4.0 MiB free");
  refused(r2, "3.0 MiB free, and 1.0 MiB in kept plans, which are left");
}

// A kept plan of `mib` MiB (its summary beside it) in `dir`, last used
// `age_s` seconds ago.
fs::path kept_plan(const fs::path& dir, const std::string& name, int age_s, int mib = 60) {
  const fs::path plan = dir / (name + ".plan");
  {
    const std::string chunk(size_t{1} << 20, 'p');
    std::ofstream out(plan, std::ios::binary);
    for (int i = 0; i < mib; ++i) out << chunk;
  }
  std::ofstream(dir / (name + ".json")) << "{}\n";
  fs::last_write_time(plan, fs::file_time_type::clock::now() - std::chrono::seconds(age_s));
  return plan;
}

// Kept plans make room on the disk for a build, least recently used first,
// and no more of them than it takes: a 600 MiB tmpfs holding two kept plans
// of 60 MiB, a build that needs its plan and 512 MiB free. The older goes,
// the newer stays, and the new plan is built, replayed and kept.
TEST_F(ReplayTest, KeptPlansMakeRoomOnTheDiskLeastRecentlyUsedFirst) {
  const fs::path small = dir() / "small";
  fs::create_directories(small);
  if (mount("heaplab-test", small.c_str(), "tmpfs", 0, "size=600m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  const fs::path older = kept_plan(small, "older-t0-untimed-v8", 200),
                 newer = kept_plan(small, "newer-t0-untimed-v8", 100);
  std::vector<Event> ev;
  for (uint64_t id = 1; id <= 1000; ++id) {
    ev.push_back(malloc_ev(16));
    ev.push_back(free_ev(id));
  }
  const std::string t = write_trace("room_made", ev, false);
  const Outcome r = run({kHeaplab, "replay", t, "-q", "--allocator", "glibc", "-o", (dir() / "room.json").string()},
                        "HEAPLAB_PLAN_DIR=" + small.string());
  const bool older_gone = !fs::exists(older) && !fs::exists(fs::path(older).replace_extension(".json"));
  const bool newer_left = fs::exists(newer);
  int plans = 0;
  for (const auto& e : fs::directory_iterator(small)) plans += e.path().extension() == ".plan";
  umount(small.c_str());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(older_gone);
  EXPECT_TRUE(newer_left);
  EXPECT_EQ(plans, 2) << "the newer kept plan and the one just built";
}

// A kept plan another command has open (it holds a shared flock on it, as
// `heaplab replay` does on the plan it uses) frees no space when removed, so
// it is neither evicted nor counted as room: the same 600 MiB tmpfs, the
// older plan open here, and the newer goes instead. Then, with 40 MiB of
// other files, the two plans left open and a third of 5 MiB free: the free
// space and the third are too little, so the third is left (counting the
// plans in use as room, it went) and the plan is held in memory instead.
TEST_F(ReplayTest, KeptPlansOpenInAnotherCommandAreNotRoom) {
  const fs::path small = dir() / "small-open";
  fs::create_directories(small);
  if (mount("heaplab-test", small.c_str(), "tmpfs", 0, "size=600m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  std::vector<int> held;
  auto keep = [&](const std::string& name, int age_s, bool in_use) {
    const fs::path plan = kept_plan(small, name, age_s);
    if (in_use) {
      held.push_back(open(plan.c_str(), O_RDONLY | O_CLOEXEC));
      EXPECT_EQ(flock(held.back(), LOCK_SH), 0);
    }
    return plan;
  };
  const fs::path older = keep("older-t0-untimed-v8", 200, true), newer = keep("newer-t0-untimed-v8", 100, false);
  std::vector<Event> ev;
  for (uint64_t id = 1; id <= 1000; ++id) {
    ev.push_back(malloc_ev(16));
    ev.push_back(free_ev(id));
  }
  const std::string t = write_trace("room_open", ev, false);
  const std::string env = "HEAPLAB_PLAN_DIR=" + small.string();
  const Outcome r =
      run({kHeaplab, "replay", t, "-q", "--allocator", "glibc", "-o", (dir() / "open.json").string()}, env);
  const bool older_left = fs::exists(older), newer_gone = !fs::exists(newer);
  // Now the plan just built and the older one are kept, both open; 40 MiB
  // of other files, a third plan of 5 MiB not open, and another trace to
  // build for.
  for (const auto& e : fs::directory_iterator(small))
    if (e.path().extension() == ".plan" && e.path() != older) {
      held.push_back(open(e.path().c_str(), O_RDONLY | O_CLOEXEC));
      EXPECT_EQ(flock(held.back(), LOCK_SH), 0);
    }
  {
    std::ofstream filler(small / "filler.bin", std::ios::binary);
    const std::string chunk(size_t{1} << 20, 'f');
    for (int i = 0; i < 40; ++i) filler << chunk;
  }
  const fs::path third = kept_plan(small, "third-t0-untimed-v8", 50, 5);
  ev.push_back(malloc_ev(32));
  const std::string t2 = write_trace("room_open_2", ev, false);
  const std::string out2 = (dir() / "open_2.json").string();
  const Outcome r2 = run({kHeaplab, "replay", t2, "-q", "--allocator", "glibc", "-o", out2}, env);
  int plans = 0;
  for (const auto& e : fs::directory_iterator(small)) plans += e.path().extension() == ".plan";
  const bool third_left = fs::exists(third);
  for (const int fd : held) close(fd);
  umount(small.c_str());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(older_left) << "a plan in use was evicted, which freed nothing";
  EXPECT_TRUE(third_left) << "a plan was evicted for a build refused all the same";
  EXPECT_TRUE(newer_gone);
  // No room on the disk, even with the plan not in use gone: the plan is
  // held in memory for this command, and the line where it went says why.
  EXPECT_EQ(r2.code, 0) << r2.err;
  const std::string where = nlohmann::json::parse(slurp(out2))["plan_dir"].get<std::string>();
  EXPECT_EQ(where.rfind("memory (" + small.string() + " has ", 0), 0u) << where;
  EXPECT_NE(where.find(" free, and 65.1 MiB in kept plans, which are left (60.1 MiB of them in use); the plan needs "),
            std::string::npos)
      << where;
  EXPECT_EQ(plans, 3) << "none evicted for a build that could not be kept";
}

// A trace whose heap is bigger than this machine's memory (a 1 TiB block
// the program had, then 2,000 small calls) that does not say so (not a
// capture: nothing states its peak): one line, and the way out, from the
// point where the plan's build finds the heap past this machine's memory
// (the first event), not at the build's end. Checked by what was done, not
// by a clock: no plan was kept, no replayer ran, so no result was written
// (a replay that ran and failed writes its exit status).
TEST_F(ReplayTest, ReplayBiggerThanMemoryIsOneLineAtOnce) {
  std::vector<Event> ev = {malloc_ev(uint64_t{1} << 40)};
  for (uint64_t id = 2; id <= 1001; ++id) {
    ev.push_back(malloc_ev(16));
    ev.push_back(free_ev(id));
  }
  ev.push_back(free_ev(1));
  const std::string t = write_trace("terabyte", ev, false);
  const std::string out = (dir() / "terabyte.json").string();
  const fs::path plans = dir() / "terabyte-plans";
  fs::create_directories(plans);
  const std::string env = "HEAPLAB_PLAN_DIR=" + plans.string();
  const Outcome r = run({kHeaplab, "replay", t, "-q", "--allocator", "glibc", "-o", out}, env);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_empty(plans));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(t + ": the replay needs at least 1024.1 GiB of memory (1024.0 GiB for the trace's live heap, "
                           "reached at event 1 of 2,002, 0.1 GiB for the plan's windows) and this machine has "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("available: replay on a machine with more memory, or with --touch none"), std::string::npos)
      << r.err;
  // Untouched, the block costs nothing: the replay runs (and the allocator
  // may refuse the terabyte: a NULL result, counted).
  const json ok = replay(t, {"--allocator", "glibc", "--touch", "none"}, 0, env);
  EXPECT_EQ(ok["exit"]["status"], "ok");
  EXPECT_EQ(ok["plan_source"], "built");
}

// A build refused midway (a heap bigger than memory that the trace does not
// state, made at its last call) takes no kept plan with it: older plans
// make room under the cache's limit only for a plan that was built. Two
// traces of the same length (plans of 0.7 MiB on disk), each plan alone
// under a 1 MiB limit, both not: the kept one survives the other's
// refusal, and goes once the other is built whole.
TEST_F(ReplayTest, ARefusedBuildTakesNoKeptPlanWithIt) {
  auto pairs = [](uint64_t last) {
    std::vector<Event> ev;
    for (uint64_t id = 1; id <= 15000; ++id) {
      ev.push_back(malloc_ev(16));
      ev.push_back(free_ev(id));
    }
    ev.push_back(malloc_ev(last));
    return ev;
  };
  const std::string kept = write_trace("kept-before", pairs(16), false);
  const std::string huge = write_trace("huge-at-the-end", pairs(uint64_t{1} << 40), false);
  const fs::path plans = dir() / "refused-plans";
  const std::string env = "HEAPLAB_PLAN_CACHE_MIB=1 HEAPLAB_PLAN_DIR=" + plans.string();
  const json a = replay(kept, {"--allocator", "glibc"}, 0, env);
  EXPECT_EQ(a["plan_kept"], true);
  auto plan_files = [&] {
    std::vector<std::pair<std::string, uintmax_t>> v;
    for (const auto& e : fs::directory_iterator(plans)) v.emplace_back(e.path().filename(), fs::file_size(e.path()));
    return v;
  };
  const auto before = plan_files();
  ASSERT_EQ(before.size(), 2u);  // the plan and its summary
  const Outcome r = run({kHeaplab, "replay", huge, "-q", "--allocator", "glibc"}, env);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("1024.0 GiB for the trace's live heap, reached at event 30,001 of 30,001"), std::string::npos)
      << r.err;
  EXPECT_EQ(plan_files(), before);
  // Built whole, the same length of plan does take its place.
  const json b = replay(huge, {"--allocator", "glibc", "--touch", "none"}, 0, env);
  EXPECT_EQ(b["plan_kept"], true);
  const auto after = plan_files();
  EXPECT_EQ(after.size(), 2u);
  EXPECT_NE(after, before);
  const json c = replay(kept, {"--allocator", "glibc"}, 0, env);
  EXPECT_EQ(c["plan_source"], "built");
}

// A captured program whose heap is bigger than this machine's memory (2
// GiB of blocks never written, among 400,000 small calls, on a machine
// said to have 1 GiB: HEAPLAB_MEMORY_AVAILABLE): refused before a plan is
// built, from the live heap peak its capture counted (the same figure the
// plan counts: checked with --touch none, where the replay runs), so that
// a long trace is not built for minutes to be refused. Nothing is built:
// the plan directory stays empty.
TEST_F(ReplayTest, CapturedHeapBiggerThanMemoryIsRefusedBeforeThePlan) {
  const std::string t = (dir() / "untouched.hlt").string();
  const Outcome c = run({kHeaplab, "capture", "-q", "-o", t, "--", kBin + "/capture/testprogs/victim_memory",
                         "untouched", "2", "200000"});
  if (c.code == 1) GTEST_SKIP() << "2 GiB cannot be taken from malloc here (overcommit, ulimit -v): " << c.err;
  ASSERT_EQ(c.code, 0) << c.err;
  const json meta = json::parse(heaplab::trace::TraceReader::open(t)->metadata());
  const uint64_t peak = meta["capture"]["heap_live_peak_bytes"].get<uint64_t>();
  EXPECT_GE(peak, uint64_t{2} << 30);
  // (The program's own objects live at once: its array of blocks, the two
  // blocks and a small one; the C library's, if any, besides.)
  const uint64_t objects = meta["capture"]["live_objects_peak"].get<uint64_t>();
  EXPECT_GE(objects, 4u);
  EXPECT_LT(objects, 100u);
  const fs::path plans = dir() / "untouched-plans";
  fs::create_directories(plans);
  const std::string env = "HEAPLAB_MEMORY_AVAILABLE=1073741824 HEAPLAB_PLAN_DIR=" + plans.string();
  for (const char* touch : {"pages", "all", "recorded"}) {
    SCOPED_TRACE(touch);
    // (recorded: the shim counted the blocks' resident pages, a page or so
    // each, so the replay writes only those and fits)
    const Outcome r =
        run({kHeaplab, "replay", t, "-q", "--allocator", "glibc", "--touch", touch, "--timeout", "120"}, env);
    if (std::string(touch) == "recorded") {
      EXPECT_EQ(r.code, 0) << r.err;
      continue;
    }
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, "heaplab: error: replay: " + t + ": the replay needs at least " +
                         heaplab::common::gib_text(peak + (uint64_t{64} << 20) + (objects + 1) * 8) + " of memory (" +
                         heaplab::common::gib_text(peak) +
                         " for the trace's live heap at its peak, as its capture counted it, 0.1 GiB for the plan's "
                         "windows) and this machine has 1.0 GiB available: replay on a machine with more memory, or "
                         "with --touch none (the heap's pages are then never written)\n");
    EXPECT_TRUE(fs::is_empty(plans));
  }
  fs::remove_all(plans);
  fs::create_directories(plans);
  const json ok = replay(t, {"--allocator", "glibc", "--touch", "none"}, 0, env);
  EXPECT_EQ(ok["exit"]["status"], "ok");
  EXPECT_EQ(ok["trace"]["live_bytes_peak"].get<uint64_t>(), peak);
  EXPECT_EQ(ok["plan_source"], "built");
  EXPECT_FALSE(fs::is_empty(plans));
}

// The same for an import from another tool (glibc's mtrace log: 20,000
// small blocks made and freed, a realloc, then 2 GiB made at the last
// call): the importer's writer counted the live peak as the plan does, so
// the refusal comes before the build, not at the build's last event.
TEST_F(ReplayTest, ImportedHeapBiggerThanMemoryIsRefusedBeforeThePlan) {
  const std::string log = (dir() / "big.mtrace").string();
  {
    std::ofstream f(log);
    f << "= Start\n";
    for (int i = 0; i < 20000; ++i)
      f << "@ ./p:[0x1] + 0x" << std::hex << (0x10000 + 64 * i) << " 0x30\n@ ./p:[0x2] - 0x" << (0x10000 + 64 * i)
        << std::dec << "\n";
    f << "@ ./p:[0x3] + 0x900000 0x100\n@ ./p:[0x4] < 0x900000\n@ ./p:[0x4] > 0x900100 0x1000\n";
    f << "@ ./p:[0x5] + 0x7f0000000000 0x80000000\n= End\n";
  }
  const std::string t = (dir() / "big-import.hlt").string();
  const Outcome c = run({kHeaplab, "import", "--from", "mtrace", log, "-o", t});
  ASSERT_EQ(c.code, 0) << c.err;
  const json meta = json::parse(heaplab::trace::TraceReader::open(t)->metadata());
  EXPECT_EQ(meta["capture"]["method"], "import");
  const uint64_t peak = (uint64_t{2} << 30) + 0x1000;
  EXPECT_EQ(meta["capture"]["heap_live_peak_bytes"].get<uint64_t>(), peak);
  EXPECT_EQ(meta["capture"]["live_objects_peak"].get<uint64_t>(), 2u);  // 2 GiB and the realloc's 4 KiB
  const fs::path plans = dir() / "big-import-plans";
  fs::create_directories(plans);
  const std::string env = "HEAPLAB_MEMORY_AVAILABLE=1073741824 HEAPLAB_PLAN_DIR=" + plans.string();
  const Outcome r = run({kHeaplab, "replay", t, "-q", "--allocator", "all", "--touch", "all"}, env);
  EXPECT_EQ(r.code, 2);
  const std::string line = "the replay needs at least " +
                           heaplab::common::gib_text(peak + (uint64_t{64} << 20) + 3 * 8) +  // (2 objects: 3 slots)
                           " of memory (" + heaplab::common::gib_text(peak) +
                           " for the trace's live heap at its peak, as its import counted it, 0.1 GiB for the "
                           "plan's windows) and this machine has 1.0 GiB available: replay on a machine with more "
                           "memory, or with --touch none (the heap's pages are then never written)";
  EXPECT_NE(r.err.find(t + ": " + line), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(plans));
  // The figure is the plan's own.
  const json ok = replay(t, {"--allocator", "glibc", "--touch", "none"}, 0, env);
  EXPECT_EQ(ok["exit"]["status"], "ok");
  EXPECT_EQ(ok["trace"]["live_bytes_peak"].get<uint64_t>(), peak);
}

// The objects a trace states live at once (capture.live_objects_peak) are
// checked before the plan too: the object table has a slot for each at
// least (8 bytes), so 200,000,000 objects cannot replay in 1 GiB even with
// --touch none; --touch first writes a page of each at most, so a 2 GiB
// heap of 100 objects fits in 1 GiB (409,600 bytes at most) and one of
// 300,000 does not (1.1 GiB of pages). A trace that states no objects is
// checked as before: its heap, where the replay writes all of it. (Figures stated in the metadata of a small trace: the
// replays that pass the check run.)
TEST_F(ReplayTest, StatedObjectsAreCheckedBeforeThePlan) {
  const fs::path plans = dir() / "objects-plans";
  const std::string env = "HEAPLAB_MEMORY_AVAILABLE=1073741824 HEAPLAB_PLAN_DIR=" + plans.string();
  const uint64_t heap = uint64_t{2} << 30;
  auto stating = [&](const std::string& name, uint64_t objects) {
    return write_trace(
        name, big_and_small(), false,
        json{{"capture", {{"method", "import"}, {"heap_live_peak_bytes", heap}, {"live_objects_peak", objects}}}}
            .dump());
  };
  using heaplab::common::gib_text;
  const std::string many = stating("many-objects", 200000000);
  fs::create_directories(plans);
  Outcome r = run({kHeaplab, "replay", many, "-q", "--allocator", "glibc", "--touch", "none"}, env);
  EXPECT_EQ(r.code, 2);
  const uint64_t table = uint64_t{200000001} * 8;
  EXPECT_EQ(r.err, "heaplab: error: replay: " + many + ": the replay needs at least " +
                       gib_text(table + (uint64_t{64} << 20)) + " of memory (" + gib_text(table) +
                       " for the object table of 200,000,000 objects live at once, 0.1 GiB for the plan's windows) "
                       "and this machine has 1.0 GiB available: replay on a machine with more memory\n");
  EXPECT_TRUE(fs::is_empty(plans));
  const std::string few = stating("few-objects", 100);
  const json ok = replay(few, {"--allocator", "glibc", "--touch", "first"}, 0, env);
  EXPECT_EQ(ok["exit"]["status"], "ok");
  fs::remove_all(plans);
  fs::create_directories(plans);
  // 300,000 objects: a page each, 1.1 GiB, less than the heap's 2 GiB.
  const std::string more = stating("more-objects", 300000);
  r = run({kHeaplab, "replay", more, "-q", "--allocator", "glibc", "--touch", "first"}, env);
  EXPECT_EQ(r.code, 2);
  const uint64_t pages = uint64_t{300000} * 4096;
  EXPECT_EQ(r.err, "heaplab: error: replay: " + more + ": the replay needs at least " +
                       gib_text(pages + (uint64_t{64} << 20) + uint64_t{300001} * 8) + " of memory (" +
                       gib_text(pages) +
                       " for a page of each of the 300,000 objects live at once (--touch first), 0.1 GiB for the "
                       "plan's windows) and this machine has 1.0 GiB available: replay on a machine with more "
                       "memory, or with --touch none (the heap's pages are then never written)\n");
  EXPECT_TRUE(fs::is_empty(plans));
  // A trace written before the objects were counted: its heap alone, where
  // the replay writes it.
  const std::string older =
      write_trace("heap-only", big_and_small(), false,
                  json{{"capture", {{"method", "ldpreload"}, {"heap_live_peak_bytes", heap}}}}.dump());
  r = run({kHeaplab, "replay", older, "-q", "--allocator", "glibc", "--touch", "pages"}, env);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "heaplab: error: replay: " + older + ": the replay needs at least " +
                       gib_text(heap + (uint64_t{64} << 20)) + " of memory (" + gib_text(heap) +
                       " for the trace's live heap at its peak, as its capture counted it, 0.1 GiB for the plan's "
                       "windows) and this machine has 1.0 GiB available: replay on a machine with more memory, or "
                       "with --touch none (the heap's pages are then never written)\n");
  EXPECT_TRUE(fs::is_empty(plans));
  EXPECT_EQ(replay(older, {"--allocator", "glibc", "--touch", "first"}, 0, env)["exit"]["status"], "ok");
}

// A heap that fits what the build allows (the memory available less the
// plan's windows) but not with the object table besides: refused after the
// build, by the whole count, which names each part. 1 GiB said to be
// available; a block 4 KiB short of 1 GiB less the windows, and 1,000 one-byte
// objects live with it (8 bytes a table slot: 8 KB).
TEST_F(ReplayTest, HeapThatFitsOnlyWithoutItsTableIsRefusedAfterTheBuild) {
  std::vector<Event> ev = {malloc_ev((uint64_t{1} << 30) - (uint64_t{64} << 20) - 4096)};
  for (int i = 0; i < 1000; ++i) ev.push_back(malloc_ev(1));
  for (uint64_t id = 1; id <= 1001; ++id) ev.push_back(free_ev(id));
  const std::string t = write_trace("fits_without_table", ev, false);
  const Outcome r = run({kHeaplab, "replay", t, "-q", "--allocator", "glibc"}, "HEAPLAB_MEMORY_AVAILABLE=1073741824");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.find("heaplab: error: replay: " + t +
                       ": the replay needs 1.0 GiB of memory (0.9 GiB for the trace's live heap at its peak, 0.0 GiB "
                       "for the object table of "),
            0u)
      << r.err;
  EXPECT_NE(r.err.find(" slots, 0.1 GiB for the plan's windows) and this machine has 1.0 GiB available: replay on a "
                       "machine with more memory, or with --touch none (the heap's pages are then never written)\n"),
            std::string::npos)
      << r.err;
}

// Per replay thread, the pager's smallest windows and, with --latency, a
// histogram per op: counted before the replay starts, and the way out named.
TEST_F(ReplayTest, ManyThreadsMemoryIsCountedBeforeTheStart) {
  std::vector<Event> events;
  for (uint32_t t = 0; t < 2000; ++t) {
    Event m = malloc_ev(16);
    m.thread = t;
    Event f = free_ev(t + 1);
    f.thread = t;
    events.push_back(m);
    events.push_back(f);
  }
  const std::string t = write_trace("threads2000", events, false);
  const Outcome r = run({kHeaplab, "replay", t, "-q", "--allocator", "glibc", "--latency", "1"},
                        "HEAPLAB_MEMORY_AVAILABLE=" + std::to_string(uint64_t{512} << 20));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(t + ": the replay needs "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" for the plan's windows, 0.9 GiB for 2,000 replay threads' latency histograms) and this "
                       "machine has 0.5 GiB available: replay on a machine with more memory, or with fewer replay "
                       "threads (--threads N)\n"),
            std::string::npos)
      << r.err;
}

// A trace with the program's own memory calls (format 1.1): `events`, and
// `memory` placed among them.
std::string write_memory_trace(const fs::path& path, std::vector<Event> events,
                               std::vector<heaplab::trace::MemoryEvent> memory) {
  heaplab::trace::TraceWriter w(path.string(), heaplab::trace::WriterOptions{});
  for (Event& e : events) w.append(e);
  w.set_memory_events(std::move(memory));
  w.close();
  return path.string();
}

// An mremap is three steps (its old length, a kStepExt with the region it
// reads and the offset, then the call): a window of the plan that ends
// between them must lose neither. Twelve remaps in a row around step 512
// (three times, one step apart, so that the window ends after each of the
// three steps of one of them), replayed with windows of 512 steps: none
// fails, and each region is where the remap put it.
TEST_F(ReplayTest, RemapAcrossAPlanWindowKeepsItsLength) {
  using heaplab::trace::MemOp;
  using heaplab::trace::MemoryEvent;
  for (int shift = 0; shift < 3; ++shift) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    std::vector<Event> ev;
    for (int i = 0; i < 600 + shift; ++i) ev.push_back(malloc_ev(32));
    for (uint64_t id = 1; id <= uint64_t(600 + shift); ++id) ev.push_back(free_ev(id));
    std::vector<MemoryEvent> mem;
    for (uint64_t r = 1; r <= 12; ++r) mem.push_back({MemOp::map, 0, 0, 0, r, 0, 8192, 0, 0, 0});
    for (uint64_t r = 1; r <= 12; ++r)
      mem.push_back({MemOp::remap, 0, uint64_t(488 + shift), 0, r, 0, 8192, 0, 12 + r, 16384});
    for (uint64_t r = 1; r <= 12; ++r) mem.push_back({MemOp::touch, 0, 1100, 0, 12 + r, 0, 16384, 4, 0, 0});
    for (uint64_t r = 1; r <= 12; ++r) mem.push_back({MemOp::unmap, 0, 1100, 0, 12 + r, 0, 16384, 0, 0, 0});
    const std::string t = write_memory_trace(dir() / ("remap_window" + std::to_string(shift) + ".hlt"), ev, mem);
    const json r = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_WINDOW_STEPS=512");
    ASSERT_TRUE(r.contains("replay")) << r.dump();
    EXPECT_EQ(r["replay"]["plan_windows"]["steps_per_window"], 512);
    EXPECT_EQ(r["replay"]["memory_calls"]["mremap"]["calls"], 12);
    EXPECT_EQ(r["replay"]["memory_calls_failed"], 0);
    EXPECT_TRUE(r["replay"]["faithful"].get<bool>());
  }
}

// A region of the break has neither an aligned base nor an aligned length:
// unmapped in two halves, it is wholly gone after the second (its bytes,
// not its pages, decide), which is not a call on unmapped bytes.
TEST_F(ReplayTest, UnalignedRegionUnmappedInHalvesIsConsistent) {
  using heaplab::trace::MemOp;
  std::vector<heaplab::trace::MemoryEvent> mem = {{MemOp::map, 0, 0, 0, 1, 0, 100, 0, 0, 0},
                                                  {MemOp::unmap, 0, 1, 0, 1, 50, 50, 0, 0, 0},
                                                  {MemOp::unmap, 0, 1, 0, 1, 0, 50, 0, 0, 0}};
  const std::string t = write_memory_trace(dir() / "brk_halves.hlt", {malloc_ev(8), free_ev(1)}, mem);
  const json r = replay(t, {"--allocator", "glibc"});
  ASSERT_TRUE(r.contains("replay")) << r.dump();
  EXPECT_EQ(r["exit"]["status"], "ok");
  EXPECT_EQ(r["replay"]["memory_calls"]["munmap"]["calls"], 2);
}

// A mapping the program never wrote costs the replay nothing (MAP_NORESERVE,
// no recorded pages): a 1 TiB one is replayed, not refused for memory.
TEST_F(ReplayTest, HugeUntouchedMappingIsNotRefused) {
  using heaplab::trace::MemOp;
  std::vector<heaplab::trace::MemoryEvent> mem = {{MemOp::map, 0, 0, 0, 1, 0, uint64_t{1} << 40, 0, 0, 0},
                                                  {MemOp::unmap, 0, 2, 0, 1, 0, uint64_t{1} << 40, 0, 0, 0}};
  const std::string t = write_memory_trace(dir() / "reserve.hlt", {malloc_ev(8), free_ev(1)}, mem);
  for (const char* touch : {"recorded", "first", "pages"}) {
    const json r = replay(t, {"--allocator", "glibc", "--touch", touch});
    EXPECT_EQ(r["exit"]["status"], "ok") << touch << " " << r.dump();
  }
}

// A plan directory that cannot be made or written: the plan goes into
// memory for this command, and the result says where and why.
TEST_F(ReplayTest, UnwritablePlanDirectoryFallsBackToMemory) {
  const std::string t = write_trace("no_plan_dir", big_and_small(), false);
  const json r = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=/proc/heaplab-no-such-dir");
  EXPECT_EQ(r["plan_source"], "built");
  EXPECT_EQ(r["plan_kept"], false);
  EXPECT_EQ(r["plan_dir"], "memory (/proc/heaplab-no-such-dir cannot be written: No such file or directory)");
  EXPECT_TRUE(r["replay"]["faithful"].get<bool>());
  // Held against the memory available first, as a plan on disk is against
  // the free space; so is the plan --emit-trace builds in memory.
  const Outcome small = run({kHeaplab, "replay", t, "--allocator", "glibc", "-q"},
                            "HEAPLAB_PLAN_DIR=/proc/heaplab-no-such-dir HEAPLAB_MEMORY_AVAILABLE=1000");
  EXPECT_EQ(small.code, 2);
  EXPECT_EQ(small.err, "heaplab: error: replay: " + t +
                           ": the replay plan needs 0.0 GiB, held in memory since /proc/heaplab-no-such-dir cannot be "
                           "written: No such file or directory, and this machine has 0.0 GiB available (set "
                           "HEAPLAB_PLAN_DIR to a file system with room for it)\n");
  const std::string emitted = (dir() / "emitted.hlt").string();
  const Outcome addresses = run({kHeaplab, "replay", t, "--allocator", "glibc", "-q", "--emit-trace", emitted},
                                "HEAPLAB_MEMORY_AVAILABLE=1000");
  EXPECT_EQ(addresses.code, 2);
  EXPECT_NE(addresses.err.find(t + ": recording the addresses of its "), std::string::npos) << addresses.err;
  EXPECT_NE(addresses.err.find(" calls needs 0.0 GiB of memory (24 bytes a call, and 0.0 GiB for the replay plan) and "
                               "this machine has 0.0 GiB available: use a machine with more memory\n"),
            std::string::npos)
      << addresses.err;
}

// A kept plan that was damaged (here: its header zeroed, its size kept) is
// noticed when it is found (or by the replayer), deleted and built again.
TEST_F(ReplayTest, DamagedKeptPlanIsBuiltAgain) {
  const std::string plans = (dir() / "damaged-plans").string();
  const std::string t = write_trace("damaged_kept", big_and_small(), false);
  const json a = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
  ASSERT_EQ(a["plan_kept"], true);
  std::string plan;
  for (const auto& e : fs::directory_iterator(plans))
    if (e.path().extension() == ".plan") plan = e.path().string();
  ASSERT_FALSE(plan.empty());
  {
    std::fstream f(plan, std::ios::in | std::ios::out | std::ios::binary);
    const std::string zeros(4096, '\0');
    f.write(zeros.data(), std::streamsize(zeros.size()));
  }
  const json b = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
  EXPECT_EQ(b["plan_source"], "built");
  EXPECT_EQ(b["plan_kept"], true);
  EXPECT_TRUE(b["replay"]["faithful"].get<bool>());
  const json c = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
  EXPECT_EQ(c["plan_source"], "kept");
  // Four bytes of a call count in the header (the replay counted its calls
  // against them, and said the replay failed): the header's hash, kept
  // beside the plan, tells, and it is built again.
  const auto damage = [&](std::streamoff at) {
    std::fstream f(plan, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(at);
    f.write("\xff\xff\xff\xff", 4);
  };
  damage(128);
  const json d = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
  EXPECT_EQ(d["plan_source"], "built");
  EXPECT_TRUE(d["replay"]["faithful"].get<bool>());
  // A step the replayer would refuse (the first, on the page after the
  // header): the plan is removed and built again, with a warning, where it
  // was an error for this and every later command; in `--allocator all`
  // too. (Its checksum tells first, before any replay.)
  for (const char* alloc : {"glibc", "all"}) {
    damage(4096);
    const Outcome r = run({kHeaplab, "replay", t, "--allocator", alloc}, "HEAPLAB_PLAN_DIR=" + plans);
    EXPECT_EQ(r.code, 0) << alloc << "\n" << r.err;
    EXPECT_NE(r.out.find(std::string(alloc == std::string("all") ? "warning: glibc/preload: " : "  warning: ") +
                         "the kept replay plan was damaged (plan: thread 0 steps 0 to 199 do not match their checksum "
                         "(the steps: the plan's file was changed after it was built)): removed, and built again\n"),
              std::string::npos)
        << alloc << "\n"
        << r.out;
    const json e = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
    EXPECT_EQ(e["plan_source"], "kept");
    EXPECT_EQ(e.value("warnings", json::array()).dump().find("damaged"), std::string::npos) << e["warnings"];
  }
  // Damage that leaves every step one the engine could run: the first
  // call's size, then the first live sum (thread 0's live array, from the
  // plan's thread table after its header). The checksums tell; before them
  // the replay ran other sizes and reported other live bytes, in silence.
  constexpr size_t kHeader = 56 + 8 * heaplab::trace::kOpCount + 24 + 8 * heaplab::replay::kMemorySteps;
  uint64_t live_at = 0;
  {
    std::ifstream f(plan, std::ios::binary);
    f.seekg(std::streamoff(kHeader + 24));
    f.read(reinterpret_cast<char*>(&live_at), 8);
  }
  ASSERT_GT(live_at, 4096u);
  for (const auto& [at, what] :
       {std::pair<std::streamoff, std::string>{4096 + 8, "the steps"}, {std::streamoff(live_at), "their live bytes"}}) {
    damage(at);
    const Outcome r = run({kHeaplab, "replay", t, "--allocator", "glibc"}, "HEAPLAB_PLAN_DIR=" + plans);
    EXPECT_EQ(r.code, 0) << what << "\n" << r.err;
    EXPECT_NE(r.out.find("  warning: the kept replay plan was damaged (plan: thread 0 steps 0 to "), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find(" do not match their checksum (" + what +
                         ": the plan's file was changed after it was built)): removed, and built again\n"),
              std::string::npos)
        << r.out;
    const json e = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=" + plans);
    EXPECT_EQ(e["plan_source"], "kept");
    EXPECT_TRUE(e["replay"]["faithful"].get<bool>());
    EXPECT_EQ(e.value("warnings", json::array()).dump().find("damaged"), std::string::npos) << e["warnings"];
  }
}

// A kept plan that another program cuts short while a replay reads it: the
// replayer says so on its result pipe (not "Bus error", nor a failed replay
// without a cause), and heaplab removes the plan, builds it again and
// replays once more, with a warning. (A replay at the recorded pace of 3 s,
// the plan emptied 0.2 s after the replayer has mapped it.)
TEST_F(ReplayTest, AKeptPlanCutShortDuringTheReplayIsBuiltAgain) {
  const std::string plans = (dir() / "cut-plans").string();
  std::vector<Event> ev;
  for (uint64_t id = 1; id <= 3000; ++id) {
    ev.push_back(malloc_ev(32, id * 1000000));
    ev.push_back(free_ev(id, id * 1000000 + 500));
  }
  const std::string t = write_trace("cut_kept", ev);
  const std::string env = "HEAPLAB_PLAN_DIR=" + quote(plans);
  const Outcome first = run({kHeaplab, "replay", t, "-q", "--timing", "recorded", "--speed", "100"}, env);
  ASSERT_EQ(first.code, 0) << first.err;
  std::string plan;
  for (const auto& e : fs::directory_iterator(plans))
    if (e.path().extension() == ".plan") plan = e.path().string();
  ASSERT_FALSE(plan.empty());
  const std::string out = (dir() / "cut_kept.json").string();
  // Emptied once the replayer has it mapped (however slow the machine).
  const std::string cut =
      "(for i in $(seq 400); do for p in /proc/[0-9]*; do if grep -qs heaplab-replay $p/cmdline "
      "&& grep -qsF " +
      quote(plan) + " $p/maps; then sleep 0.2; : > " + quote(plan) + "; exit; fi; done; sleep 0.05; done) & ";
  const Outcome r = run({kHeaplab, "replay", t, "--timing", "recorded", "-o", out}, cut + env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("Bus error"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;  // (said once, as a warning)
  const json j = json::parse(slurp(out));
  EXPECT_EQ(j["plan_source"], "built");
  EXPECT_NE(j["warnings"].dump().find("the kept replay plan was damaged (plan: the file shrank while it was read "
                                      "(rewritten or truncated by another program?)): removed, and built again"),
            std::string::npos)
      << j["warnings"];
  EXPECT_TRUE(j["replay"]["faithful"].get<bool>());
}

// A plan that was to be kept and could not be (here: its name is taken by
// a directory, so it cannot be renamed into place) is said, not dropped in
// silence; the replay runs on it all the same, and no summary is left
// without its plan.
TEST_F(ReplayTest, APlanThatCouldNotBeKeptIsSaid) {
  const fs::path plans = dir() / "unkeepable-plans";
  const std::string t = write_trace("unkeepable", big_and_small(), false);
  const std::string base = heaplab::replay::file_id(t) + "-t0-untimed-live-v10";
  fs::create_directories(plans / (base + ".plan"));
  std::ofstream(plans / (base + ".plan") / "taken") << "x";
  const json j = replay(t, {"--allocator", "glibc"}, 0, "HEAPLAB_PLAN_DIR=" + quote(plans.string()));
  EXPECT_EQ(j["plan_kept"], false);
  EXPECT_TRUE(j["replay"]["faithful"].get<bool>());
  EXPECT_NE(j["warnings"].dump().find("the replay plan was built for this command alone, not kept for later ones: "
                                      "cannot name it in " +
                                      plans.string() + ": "),
            std::string::npos)
      << j["warnings"];
  EXPECT_FALSE(fs::exists(plans / (base + ".json")));
}

TEST_F(ReplayTest, FileSizeLimitIsAnErrorNotASignal) {
  const std::string t = producer_consumer();
  const Outcome r = run({kHeaplab, "replay", t}, "ulimit -f 100; HEAPLAB_PLAN_DIR=" + (dir() / "fsize").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("heaplab: error: replay: " + t + ": sizing the replay plan (", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("bytes): File too large\n"), std::string::npos) << r.err;
}

TEST_F(ReplayTest, DirectModeWithoutItsReplayerSaysWhatToInstall) {
  const std::string empty = (dir() / "no_replayers").string();
  fs::create_directories(empty);
  const Outcome r = run({kHeaplab, "replay", producer_consumer(), "--allocator", "jemalloc", "--load", "direct"},
                        "HEAPLAB_REPLAYER_DIR=" + quote(empty));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: replay: allocator 'jemalloc': direct load is not available: heaplab-replay-jemalloc "
            "was not built (install libjemalloc-dev and rebuild heaplab)\n");
  const Outcome l = run({kHeaplab, "replay", "--list-allocators"}, "HEAPLAB_REPLAYER_DIR=" + quote(empty));
  EXPECT_EQ(l.code, 0);
  EXPECT_NE(l.out.find("no: heaplab-replay-mimalloc not built (install libmimalloc-dev and rebuild)"),
            std::string::npos)
      << l.out;
}

TEST_F(ReplayTest, ListAllocatorsShowsBothModes) {
  const Outcome r = run({kHeaplab, "replay", "--list-allocators"});
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* line : {"glibc      yes (the system allocator)", "jemalloc   yes (", "yes (heaplab-replay-jemalloc)",
                           "yes (heaplab-replay-mimalloc)", "yes (heaplab-replay-tcmalloc)", "PATH.so"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

// --- Replay settings ---------------------------------------------------------

// 16 blocks of 4 MiB live at once: touching every page makes them resident,
// touching none leaves them (fresh mmap'd memory) out of RSS.
TEST_F(ReplayTest, TouchModesDecideWhatBecomesResident) {
  std::vector<Event> ev;
  for (int i = 0; i < 16; ++i) ev.push_back(malloc_ev(4 << 20));
  for (uint64_t id = 1; id <= 16; ++id) ev.push_back(free_ev(id));
  const std::string t = write_trace("big_blocks", ev, false);
  const json none = replay(t, {"--touch", "none"});
  const json pages = replay(t, {"--touch", "pages"});
  const json all = replay(t, {"--touch", "all"});
  const auto rss = [](const json& r) { return r["replay"]["max_rss_kib"].get<int64_t>(); };
  EXPECT_LT(rss(none), 40 * 1024);
  EXPECT_GT(rss(pages), 64 * 1024);
  EXPECT_GT(rss(all), 64 * 1024);
  EXPECT_EQ(pages["replay"]["touch"], "pages");
}

// The program's own memory (format 1.1) is made with real system calls on
// every allocator, and --touch recorded writes the pages the program had
// resident: a 16 MiB block of which it used 1 MiB, and a 32 MiB mapping of
// which it used 8 MiB.
TEST_F(ReplayTest, ProgramsOwnMemoryIsReplayedOnEveryAllocator) {
  using heaplab::trace::MemOp;
  using heaplab::trace::MemoryEvent;
  MemoryEvent map{MemOp::map, 0, 1, 0, 1, 0, 32 << 20, 0, 0, 0};
  MemoryEvent touch{MemOp::touch, 0, 1, 0, 1, 0, 32 << 20, 2048, 0, 0};
  MemoryEvent unmap{MemOp::unmap, 0, 3, 0, 1, 0, 32 << 20, 2048, 0, 0};
  MemoryEvent object{MemOp::object, 0, 0, 0, 1, 0, 16 << 20, 256, 0, 0};
  const std::string path =
      write_memory_trace(dir() / "own_memory.hlt", {malloc_ev(16 << 20), malloc_ev(100), free_ev(1), free_ev(2)},
                         {map, touch, unmap, object});
  for (const char* alloc : {"glibc", "jemalloc", "mimalloc", "tcmalloc"}) {
    SCOPED_TRACE(alloc);
    const json rec = replay(path, {"--allocator", alloc, "--sample-ms", "1"});
    const json pages = replay(path, {"--allocator", alloc, "--sample-ms", "1", "--touch", "pages"});
    ASSERT_TRUE(rec.contains("replay")) << rec.dump();
    EXPECT_EQ(rec["replay"]["touch"], "recorded");
    EXPECT_EQ(rec["replay"]["faithful"], true);
    EXPECT_EQ(rec["replay"]["memory_calls"],
              json::parse(R"({"mmap": {"calls": 1, "expected": 1}, "munmap": {"calls": 1, "expected": 1},
                               "touch_mapping": {"calls": 1, "expected": 1},
                               "touch_object": {"calls": 1, "expected": 1}})"));
    EXPECT_EQ(rec["replay"]["memory_calls_failed"], 0);
    EXPECT_EQ(rec["trace"]["memory"]["regions"], 1);
    EXPECT_EQ(rec["trace"]["memory"]["mapped_bytes_peak"], 32 << 20);
    EXPECT_EQ(rec["trace"]["calls"], 4);
    // Heap peak: 8 MiB of the mapping + 1 MiB of the block (+ the allocator's own);
    // with --touch pages all 16 MiB of the block.
    const double rec_mib = rec["replay"]["memory"]["heap_peak_kib"].get<double>() / 1024;
    const double pages_mib = pages["replay"]["memory"]["heap_peak_kib"].get<double>() / 1024;
    EXPECT_GT(rec_mib, 8.9);
    EXPECT_LT(rec_mib, 16);  // tcmalloc holds 4-6 MiB of its own (15.1 MiB seen in a CI run)
    EXPECT_GT(pages_mib, 23.9);
    EXPECT_LT(pages_mib, 32);  // tcmalloc's own again (30.1 MiB seen in a CI run)
  }
}

// --latency-of program times exactly the calls the program timed: the same
// count per op on both sides, and the result carries both distributions.
TEST_F(ReplayTest, LatencyOfTheProgramsOwnTimedCalls) {
  const std::string path = (dir() / "program_latency.hlt").string();
  {
    heaplab::trace::TraceWriter w(path, heaplab::trace::WriterOptions{});
    std::vector<Event> ev;
    for (int i = 0; i < 100; ++i) ev.push_back(malloc_ev(64));
    for (uint64_t id = 1; id <= 100; ++id) ev.push_back(free_ev(id));
    for (Event& e : ev) w.append(e);
    std::vector<heaplab::trace::MemoryEvent> timed;
    for (uint64_t seq = 0; seq < 200; seq += 10) {  // 10 mallocs and 10 frees, 40 ns each
      heaplab::trace::MemoryEvent m;
      m.op = heaplab::trace::MemOp::latency;
      m.after = seq;
      m.length = 40;
      timed.push_back(m);
    }
    w.set_memory_events(timed);
    w.close();
  }
  const json r = replay(path, {"--latency-of", "program"});
  ASSERT_TRUE(r.contains("replay")) << r.dump();
  EXPECT_EQ(r["replay"]["latency"]["calls"], "program");
  EXPECT_EQ(r["replay"]["latency"]["ops"]["malloc"]["samples"], 10);
  EXPECT_EQ(r["replay"]["latency"]["ops"]["free"]["samples"], 10);
  EXPECT_EQ(r["trace"]["program_latency"]["ops"]["malloc"]["samples"], 10);
  EXPECT_EQ(r["trace"]["program_latency"]["ops"]["free"]["samples"], 10);
  EXPECT_NEAR(r["trace"]["program_latency"]["ops"]["malloc"]["p50_ns"].get<double>(), 40, 2);
  const Outcome text = run({kHeaplab, "replay", path, "--latency-of", "program"});
  EXPECT_NE(text.out.find("latency in the program (ns, the calls it timed), and of the same calls here:"),
            std::string::npos)
      << text.out;
  // Without --latency-of program the replay says how to compare.
  const Outcome plain = run({kHeaplab, "replay", path});
  EXPECT_NE(plain.out.find("replay with --latency-of program to time the same calls"), std::string::npos) << plain.out;
  // With --latency N too: the program's calls, and the summary says so (it
  // said "every 16 call(s) timed").
  const Outcome both = run({kHeaplab, "replay", path, "--latency-of", "program", "--latency", "16"});
  EXPECT_NE(both.out.find("  latency (ns; the calls the program timed; "), std::string::npos) << both.out;
  // A trace the program timed no call of: a warning, not an empty table.
  const std::string untimed = write_trace("untimed_program", {malloc_ev(64), free_ev(1)});
  const Outcome none = run({kHeaplab, "replay", untimed, "--latency-of", "program"});
  EXPECT_EQ(none.code, 0);
  EXPECT_NE(none.out.find("  warning: --latency-of program: the trace has no calls the program timed (capture it "
                          "with --latency N): no latency was measured\n"),
            std::string::npos)
      << none.out;
  EXPECT_EQ(none.out.find("  latency (ns;"), std::string::npos) << none.out;
}

// Calls on one region from two threads run in trace order: a large touch
// on thread 0 finishes before thread 1 unmaps the region, and a block that
// thread 0 writes (its recorded pages) is freed by thread 1 only after.
TEST_F(ReplayTest, RegionCallsAcrossThreadsRunInOrder) {
  Event a = malloc_ev(64 << 20);  // seq 0, thread 0
  Event b = malloc_ev(16);        // seq 1, thread 1
  b.thread = 1;
  Event f = free_ev(1);  // seq 2, thread 1: frees thread 0's 64 MiB block
  f.thread = 1;
  Event g = free_ev(2);  // seq 3, thread 1
  g.thread = 1;
  using heaplab::trace::MemOp;
  using heaplab::trace::MemoryEvent;
  MemoryEvent map{MemOp::map, 0, 0, 0, 1, 0, 64 << 20, 0, 0, 0};
  MemoryEvent touch{MemOp::touch, 0, 0, 0, 1, 0, 64 << 20, 16384, 0, 0};
  MemoryEvent unmap{MemOp::unmap, 1, 2, 0, 1, 0, 64 << 20, 16384, 0, 0};
  MemoryEvent object{MemOp::object, 0, 0, 0, 1, 0, 64 << 20, 16384, 0, 0};
  const std::string path = write_memory_trace(dir() / "region_threads.hlt", {a, b, f, g}, {map, touch, unmap, object});
  for (int i = 0; i < 5; ++i) {
    const json r = replay(path, {"--allocator", "glibc"});
    ASSERT_TRUE(r.contains("replay")) << r.dump();
    EXPECT_EQ(r["replay"]["faithful"], true);
    EXPECT_EQ(r["replay"]["memory_calls_failed"], 0);
    EXPECT_EQ(r["exit"]["status"], "ok");
  }
}

// A memory call on bytes the trace already unmapped would write or unmap
// whatever the allocator put there since: refused in one line, exit 2.
TEST_F(ReplayTest, MemoryCallOnUnmappedBytesIsRefused) {
  // A MiB mapped, `unmapped` bytes of it unmapped, then a touch of 8 KiB at 4 KiB.
  const auto write = [&](const std::string& name, uint64_t unmapped) {
    const std::string path = (dir() / name).string();
    heaplab::trace::TraceWriter w(path, heaplab::trace::WriterOptions{});
    std::vector<Event> ev = {malloc_ev(16), free_ev(1)};
    for (Event& e : ev) w.append(e);
    using heaplab::trace::MemOp;
    using heaplab::trace::MemoryEvent;
    MemoryEvent map{MemOp::map, 0, 0, 0, 1, 0, 1 << 20, 0, 0, 0};
    MemoryEvent unmap{MemOp::unmap, 0, 1, 0, 1, 0, unmapped, 0, 0, 0};
    MemoryEvent touch{MemOp::touch, 0, 2, 0, 1, 4096, 8192, 2, 0, 0};
    w.set_memory_events({map, unmap, touch});
    w.close();
    return path;
  };
  const std::string path = write("touch_after_unmap.hlt", 1 << 19);
  const Outcome r = run({kHeaplab, "replay", path, "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "heaplab: error: replay: " + path +
                       ": inconsistent trace: memory call 2 (touch) on bytes 4096..12288 of region 1, already "
                       "unmapped\n");
  // A region wholly unmapped is not followed any more: a call that names
  // it is refused when the trace is opened.
  const std::string gone = write("touch_after_all_unmapped.hlt", 1 << 20);
  const Outcome g = run({kHeaplab, "replay", gone, "-q"});
  EXPECT_EQ(g.code, 2);
  EXPECT_EQ(g.err.rfind("heaplab: error: replay: " + gone + ": offset ", 0), 0u) << g.err;
  EXPECT_NE(g.err.find(": memory record 2 (touch): region 1 is no longer mapped\n"), std::string::npos) << g.err;
  EXPECT_EQ(std::count(g.err.begin(), g.err.end(), '\n'), 1);
}

// Several allocators in one command build the plan once: the first replay
// builds it, the others reuse it (and report the same trace figures).
TEST_F(ReplayTest, SeveralAllocatorsBuildThePlanOnce) {
  const json r = replay(producer_consumer(), {"--allocator", "glibc,jemalloc,mimalloc"}, 0,
                        "HEAPLAB_PLAN_DIR=" + (dir() / "once").string());  // (none kept yet)
  ASSERT_TRUE(r.is_array()) << r.dump();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["plan_reused"], false);
  EXPECT_EQ(r[1]["plan_reused"], true);
  EXPECT_EQ(r[2]["plan_reused"], true);
  EXPECT_EQ(r[0]["plan_source"], "built");
  EXPECT_EQ(r[1]["plan_source"], "this command");
  for (const json& one : r) {
    EXPECT_EQ(one["replay"]["faithful"], true) << one["allocator"];
    EXPECT_EQ(one["trace"], r[0]["trace"]);
  }
}

// A trace written before format 1.1 (no memory block) replays as before,
// --touch recorded touching every page as --touch pages did.
TEST_F(ReplayTest, OldTracesStillReplay) {
  std::vector<Event> ev;
  for (int i = 0; i < 4; ++i) ev.push_back(malloc_ev(4 << 20));
  for (uint64_t id = 1; id <= 4; ++id) ev.push_back(free_ev(id));
  const std::string t = write_trace("old_format", ev, false);
  EXPECT_EQ(heaplab::trace::TraceReader::open(t)->minor_version(), 0u);
  const json rec = replay(t, {"--sample-ms", "1"});
  EXPECT_EQ(rec["replay"]["touch"], "recorded");
  EXPECT_EQ(rec["replay"]["faithful"], true);
  EXPECT_FALSE(rec["replay"].contains("memory_calls"));
  EXPECT_FALSE(rec["trace"].contains("memory"));
  EXPECT_GT(rec["replay"]["memory"]["heap_peak_kib"].get<double>(), 15.9 * 1024);
}

// --timing recorded keeps the recorded pace: a trace whose calls span 200 ms
// takes at least that long at speed 1, and a tenth at speed 10.
TEST_F(ReplayTest, RecordedTimingKeepsThePace) {
  std::vector<Event> ev;
  for (int i = 0; i < 20; ++i) ev.push_back(malloc_ev(64, uint64_t(i) * 10'000'000));  // every 10 ms
  ev.push_back(free_ev(1, 200'000'000));
  const std::string t = write_trace("paced", ev);
  const json slow = replay(t, {"--timing", "recorded"});
  const json fast = replay(t, {"--timing", "recorded", "--speed", "10"});
  EXPECT_GE(slow["replay"]["wall_s"].get<double>(), 0.199);
  EXPECT_GE(fast["replay"]["wall_s"].get<double>(), 0.0199);
  EXPECT_LT(fast["replay"]["wall_s"].get<double>(), slow["replay"]["wall_s"].get<double>());
  EXPECT_EQ(fast["replay"]["speed"], 10.0);
}

// --latency N times every Nth call of each replay thread: all 200 calls of
// a one-thread trace with N = 1, ceil(200 / 3) = 67 with N = 3; the
// percentiles never decrease, and the timer and its cost are reported.
TEST_F(ReplayTest, LatencySamplesEveryNthCall) {
  const std::string t = write_trace("latency", big_and_small());
  const json all = replay(t, {"--latency", "1"});
  const json& l = all["replay"]["latency"];
  EXPECT_EQ(l["ops"]["malloc"]["samples"], 100);
  EXPECT_EQ(l["ops"]["free"]["samples"], 100);
  EXPECT_EQ(l["sample_every"], 1);
  EXPECT_TRUE(l["timer"] == "tsc" || l["timer"] == "clock_gettime");
  EXPECT_GT(l["timer_overhead_ns"].get<double>(), 0.0);
  for (const char* op : {"malloc", "free"}) {
    const json& o = l["ops"][op];
    double prev = 0;
    for (const char* k : {"p50_ns", "p90_ns", "p99_ns", "p99.9_ns", "p99.99_ns", "max_ns"}) {
      EXPECT_GE(o[k].get<double>(), prev) << op << " " << k;
      prev = o[k].get<double>();
    }
  }
  const json third = replay(t, {"--latency", "3"});
  const json& l3 = third["replay"]["latency"];
  EXPECT_EQ(l3["ops"]["malloc"]["samples"].get<int>() + l3["ops"]["free"]["samples"].get<int>(), 67);
  EXPECT_FALSE(replay(t, {})["replay"].contains("latency"));
}

// Memory over time: 16 blocks of 1 MiB allocated at once and held until 1 s
// (at the recorded pace; writing their pages takes ~0.1 s on this VM), then
// all freed. The sampler sees exactly the 16 MiB live, a heap RSS above it
// while they are live, and the RSS fall after the frees on every allocator
// once it gives memory back: glibc (the blocks are mmap'd), jemalloc told to
// purge at once, mimalloc to reset freed pages at once, tcmalloc to decommit
// freed spans. Page faults count the pages first touched.
TEST_F(ReplayTest, MemoryTimelineSeesThePeakAndTheFall) {
  std::vector<Event> ev;
  for (int i = 0; i < 16; ++i) ev.push_back(malloc_ev(1 << 20, uint64_t(i) * 1000));
  for (uint64_t id = 1; id <= 16; ++id) ev.push_back(free_ev(id, 1'000'000'000 + id * 1000));
  // A last call 100 ms later, so the fall is sampled while the replay runs.
  ev.push_back(malloc_ev(16, 1'100'000'000));
  const std::string t = write_trace("hold_16m", ev);
  struct On {
    std::string allocator, env;
  };
  for (const On& c : {On{"glibc", ""}, On{"jemalloc", "MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0"},
                      On{"mimalloc", "MIMALLOC_RESET_DELAY=0"}, On{"tcmalloc", "TCMALLOC_AGGRESSIVE_DECOMMIT=t"}}) {
    SCOPED_TRACE(c.allocator);
    const json r = replay(t, {"--allocator", c.allocator, "--timing", "recorded", "--sample-ms", "5"}, 0, c.env);
    ASSERT_TRUE(r.is_object());
    const json& m = r["replay"]["memory"];
    EXPECT_EQ(m["live_bytes_peak_sampled"].get<int64_t>(), int64_t{16} << 20) << m["timeline"].dump();
    EXPECT_EQ(r["trace"]["live_bytes_peak"].get<uint64_t>(), uint64_t{16} << 20);
    EXPECT_DOUBLE_EQ(m["live_peak_sampled_fraction"].get<double>(), 1.0);
    EXPECT_GE(m["heap_kib_at_live_peak"].get<uint64_t>(), 16u * 1024);
    EXPECT_GT(m["peak_rss_kib"].get<uint64_t>(), 16u * 1024);
    EXPECT_GE(m["fragmentation"]["at_live_peak"].get<double>(), 1.0);
    EXPECT_LT(m["heap_final_kib"].get<uint64_t>(), m["heap_kib_at_live_peak"].get<uint64_t>() / 2);
    // The page footprint (mincore): the 16 MiB resident at the live high
    // (4,096 pages and a little), under half of that at the end.
    const json& fp = m["footprint"];
    EXPECT_EQ(fp["at_live_high"]["live_bytes"].get<int64_t>(), int64_t{16} << 20);
    EXPECT_GE(fp["at_live_high"]["pages"].get<int64_t>(), 4096);
    EXPECT_LT(fp["at_live_high"]["pages"].get<int64_t>(), 4096 + 2048);
    EXPECT_LT(fp["at_end"]["pages"].get<int64_t>(), fp["at_live_high"]["pages"].get<int64_t>() / 2);
    // The timeline's columns line up, and time goes forward.
    const json& tl = m["timeline"];
    const size_t n = tl["t_ms"].size();
    EXPECT_GE(n, 100u);  // 1.1 s at 5 ms
    for (const char* col : {"rss_kib", "anon_kib", "heap_kib", "live_bytes"}) EXPECT_EQ(tl[col].size(), n) << col;
    for (size_t i = 1; i < n; ++i) EXPECT_GE(tl["t_ms"][i].get<double>(), tl["t_ms"][i - 1].get<double>());
    EXPECT_EQ(tl["live_bytes"][n - 1].get<int64_t>(), 16);
    EXPECT_GE(r["replay"]["page_faults"]["minor"].get<uint64_t>(), 4096u);
    const json& touched = m["footprint"]["touched"];
    if (touched["method"] == "none")
      EXPECT_NE(touched["why"].get<std::string>().find("soft-dirty"), std::string::npos);
    else
      EXPECT_GE(touched["pages"].get<int64_t>(), 4096);
    if (!c.env.empty()) {  // the setting is in the result
      const size_t eq = c.env.find('=');
      EXPECT_EQ(r["allocator"]["settings"][c.env.substr(0, eq)], c.env.substr(eq + 1));
    }
  }
}

// A trace whose live bytes peak at a known value, replayed as fast as it
// goes: 64 blocks of 256 KiB held together (16 MiB), freed, then small
// churn. Periodic samples would miss a peak this short; the thread that
// makes the peak call has the sampler take a snapshot right after it, so
// every allocator shows exactly 16 MiB live there, with the heap's RSS
// and page footprint above it.
TEST_F(ReplayTest, LivePeakIsMeasuredExactlyWithoutPacing) {
  std::vector<Event> ev;
  for (int i = 0; i < 64; ++i) ev.push_back(malloc_ev(256 << 10));
  for (uint64_t id = 1; id <= 64; ++id) ev.push_back(free_ev(id));
  for (uint64_t i = 0; i < 1000; ++i) {
    ev.push_back(malloc_ev(1024));
    ev.push_back(free_ev(65 + i));
  }
  const std::string t = write_trace("peak_16m", ev, false);
  for (const char* a : {"glibc", "jemalloc", "mimalloc", "tcmalloc"}) {
    SCOPED_TRACE(a);
    const json r = replay(t, {"--allocator", a});
    ASSERT_TRUE(r.is_object());
    const json& m = r["replay"]["memory"];
    EXPECT_EQ(m["live_bytes_peak_sampled"].get<int64_t>(), int64_t{16} << 20);
    EXPECT_EQ(m["at_live_peak_source"], "snapshot right after the trace's live-peak call");
    EXPECT_DOUBLE_EQ(m["live_peak_sampled_fraction"].get<double>(), 1.0);
    EXPECT_GE(m["heap_kib_at_live_peak"].get<uint64_t>(), 16u * 1024);
    EXPECT_GT(m["rss_kib_at_live_peak"].get<uint64_t>(), 16u * 1024);
    EXPECT_GT(m["peak_rss_kib"].get<uint64_t>(), 16u * 1024);
    const double frag = m["fragmentation"]["at_live_peak"].get<double>();
    EXPECT_GE(frag, 1.0);
    EXPECT_LT(frag, 1.5);
    EXPECT_EQ(m["footprint"]["at_live_peak"]["live_bytes"].get<int64_t>(), int64_t{16} << 20);
    EXPECT_GE(m["footprint"]["at_live_peak"]["pages"].get<int64_t>(), 4096);
    // The snapshot is in the timeline, in its place.
    const json& tl = m["timeline"];
    bool seen = false;
    for (size_t i = 0; i < tl["t_ms"].size(); ++i) {
      if (i) {
        EXPECT_GE(tl["t_ms"][i].get<double>(), tl["t_ms"][i - 1].get<double>());
      }
      seen = seen || tl["live_bytes"][i].get<int64_t>() == int64_t{16} << 20;
    }
    EXPECT_TRUE(seen);
  }
  // --no-memory: no sampler, no memory figures.
  const json off = replay(t, {"--no-memory"});
  EXPECT_FALSE(off["replay"].contains("memory"));
  EXPECT_TRUE(off["replay"]["faithful"].get<bool>());
}

// Fragmentation from the same instants: 131,072 objects of 64 bytes (8 MiB),
// then every other one freed. The live bytes halve, but no page empties, so
// no allocator can give memory back: heap RSS over live bytes is near 1 at
// the peak and about twice that at the end.
TEST_F(ReplayTest, FreeingEveryOtherSmallObjectDoublesFragmentation) {
  constexpr uint64_t kObjects = 131072;
  std::vector<Event> ev;
  for (uint64_t i = 0; i < kObjects; ++i) ev.push_back(malloc_ev(64));
  for (uint64_t id = 2; id <= kObjects; id += 2) ev.push_back(free_ev(id));
  const std::string t = write_trace("half_freed", ev, false);
  for (const char* a : {"glibc", "jemalloc", "mimalloc", "tcmalloc"}) {
    SCOPED_TRACE(a);
    const json r = replay(t, {"--allocator", a, "--sample-ms", "1"});  // (a replay of ~10 ms)
    ASSERT_TRUE(r.is_object());
    const json& m = r["replay"]["memory"];
    const json& f = m["fragmentation"];
    EXPECT_EQ(m["live_bytes_peak_sampled"].get<int64_t>(), int64_t(kObjects * 64));
    EXPECT_EQ(m["timeline"]["live_bytes"].back().get<int64_t>(), int64_t(kObjects * 32));
    const double peak = f["at_live_peak"].get<double>(), end = f["final"].get<double>();
    EXPECT_GE(peak, 0.95) << f.dump();
    EXPECT_LT(peak, 1.6) << f.dump();
    EXPECT_GT(end, 1.8 * peak) << f.dump();
    EXPECT_LT(end, 2.2 * peak) << f.dump();
    const double tw = f["time_weighted"].get<double>();
    EXPECT_GE(tw, peak * 0.9) << f.dump();
    EXPECT_LE(tw, end * 1.1) << f.dump() << m["timeline"].dump();
  }
}

// --pin binds each replay thread (hwloc): an explicit CPU puts every thread
// there, and the sampler on a core left over; compact puts thread i on the
// i-th CPU. Each thread reports the CPU it finished on.
TEST_F(ReplayTest, PinningBindsTheThreads) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || !CPU_ISSET(0, &set) || !CPU_ISSET(1, &set))
    GTEST_SKIP() << "needs CPUs 0 and 1";
  const std::string t = producer_consumer();
  const json one = replay(t, {"--pin", "1"});
  ASSERT_TRUE(one.is_object());
  const json& p = one["replay"]["pinning"];
  EXPECT_EQ(p["policy"], "1");
  // (One a replay thread: as many as the capture's threads ran at once,
  // which a loaded machine can make fewer than its 5: fold_threads.)
  const size_t threads = one["replay"]["threads"].size();
  EXPECT_GE(threads, 2u);
  EXPECT_EQ(p["threads"], json(std::vector<std::string>(threads, "1")));
  EXPECT_EQ(p["sampler"], "0");
  for (const json& th : one["replay"]["threads"]) EXPECT_EQ(th["cpu"], 1);
  const json compact = replay(t, {"--pin", "compact", "--threads", "2"});
  EXPECT_EQ(compact["replay"]["pinning"]["threads"], json({"0", "1"}));
  EXPECT_EQ(compact["replay"]["threads"][0]["cpu"], 0);
  EXPECT_EQ(compact["replay"]["threads"][1]["cpu"], 1);
  EXPECT_EQ(replay(t, {})["replay"]["pinning"], json({{"policy", "none"}}));
}

// --membind binds the replayer's memory to NUMA nodes (hwloc) before the
// allocator allocates; the result has what was asked and what the kernel
// reports back. Without NUMA in the kernel (one node, all the memory) a
// binding to that node is moot and says so; a node that is not there is an
// error (BadInputGivesOneLine).
TEST_F(ReplayTest, MembindBindsTheReplaysMemory) {
  const std::string t = producer_consumer();
  for (const std::vector<std::string>& opts : {std::vector<std::string>{"--membind", "0"},
                                               {"--membind", "interleave"},
                                               {"--membind", "local", "--pin", "compact"}}) {
    SCOPED_TRACE(opts[1]);
    const json r = replay(t, opts);
    ASSERT_TRUE(r.is_object());
    const json& m = r["replay"]["pinning"]["membind"];
    EXPECT_EQ(m["policy"], opts[1]);
    if (opts[1] == "0") {
      EXPECT_EQ(m["nodes"], "0");
    } else {
      EXPECT_FALSE(m["nodes"].get<std::string>().empty());  // all nodes, or the pinned CPUs'
    }
    if (m["kernel"].is_string()) {
      EXPECT_EQ(m["kernel"], "no NUMA support: one node, all the memory (the binding is moot)");
      EXPECT_EQ(r["replay"]["pinning"]["numa_nodes"], 1);
    } else {
      EXPECT_EQ(m["kernel"]["nodes"], m["nodes"]);
      EXPECT_EQ(m["kernel"]["policy"], opts[1] == "interleave" ? "interleave" : "bind");
    }
    EXPECT_TRUE(r["replay"]["faithful"].get<bool>());
  }
}

// The replayer also runs alone on a trace, e.g. under a hand-written
// LD_PRELOAD, and prints its JSON.
TEST_F(ReplayTest, ReplayerRunsStandaloneOnATrace) {
  const Outcome r =
      run({kBin + "/cli/heaplab-replay", producer_consumer()}, "LD_PRELOAD=" + quote(std::string(TEST_ALLOC_NULL)));
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_TRUE(j["faithful"].get<bool>());
  EXPECT_EQ(j["allocator"]["library"], fs::canonical(TEST_ALLOC_NULL).string());
  const Outcome bad = run({kBin + "/cli/heaplab-replay", producer_consumer(), "--touch", "sometimes"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "heaplab-replay: --touch: expected none, first, pages, all or recorded, not 'sometimes'\n");
}

// A truncated trace replays what it has: calls on objects whose allocation
// was cut off are counted, not replayed.
TEST_F(ReplayTest, TruncatedTraceReplaysWhatIsLeft) {
  const std::string t = producer_consumer();
  const std::string cut = (dir() / "cut.hlt").string();
  const std::string bytes = slurp(t);
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const json r = replay(cut, {});
  ASSERT_TRUE(r.is_object());
  EXPECT_FALSE(r["trace"]["complete"].get<bool>());
  EXPECT_TRUE(r["replay"]["faithful"].get<bool>());
  EXPECT_FALSE(r["trace"].value("warning", "").empty());
  // Said among the warnings too, which the summary prints above "calls
  // exactly as recorded".
  ASSERT_TRUE(r.contains("warnings")) << r.dump();
  bool said = false;
  for (const auto& w : r["warnings"])
    said = said || (w.get<std::string>().rfind("trace is truncated", 0) == 0 &&
                    w.get<std::string>().find("only the calls the trace kept are replayed") != std::string::npos);
  EXPECT_TRUE(said) << r["warnings"].dump();
  // -q leaves out the summary, not the warnings: on standard error, each
  // once (a CI job's replay of a cut trace passed without a word), for one
  // allocator and for several.
  for (const char* alloc : {"glibc", "glibc,jemalloc"}) {
    const Outcome q = run({kHeaplab, "replay", cut, "-q", "--threads", "1", "--allocator", alloc});
    EXPECT_EQ(q.code, 0) << q.err;
    EXPECT_EQ(q.out, "");
    EXPECT_EQ(q.err.rfind("heaplab: warning: replay: trace is truncated", 0), 0u) << q.err;
    EXPECT_EQ(std::count(q.err.begin(), q.err.end(), '\n'), 1) << q.err;
  }
}

}  // namespace
