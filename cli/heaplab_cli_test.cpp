// End-to-end tests of the heaplab command: exit codes, one-line errors and
// golden outputs (one per output format). HEAPLAB_UPDATE_GOLDEN=1 rewrites
// the golden files from the current output.
#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/pt/pt_synth.h"
#include "common/process.h"

namespace {

namespace fs = std::filesystem;
namespace process = heaplab::process;
using heaplab::trace::testutil::SmallFs;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}
const std::string kSource = env_or("HEAPLAB_SOURCE_DIR", HEAPLAB_TEST_SOURCE_DIR);
const std::string kBinary = env_or("HEAPLAB_BINARY_DIR", HEAPLAB_TEST_BINARY_DIR);
const std::string kHeaplab = kBinary + "/cli/heaplab";
const std::string kData = kSource + "/cli/testdata";

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(int fd) {
  std::string s;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
  return s;
}

// Runs heaplab with `args` in directory `cwd`; stdout and stderr go to
// files of a private temporary directory (tests run in parallel).
Result run(const std::vector<std::string>& args, const std::string& cwd = ".") {
  char tmpl[] = "/tmp/heaplab_cli_io_XXXXXX";
  const std::string io = mkdtemp(tmpl);
  const std::string out_path = io + "/stdout", err_path = io + "/stderr";
  process::Spec spec;
  spec.argv = {kHeaplab};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.cwd = cwd;
  spec.out = process::Stdio::file;
  spec.out_file = out_path;
  spec.err = process::Stdio::file;
  spec.err_file = err_path;
  const int st = process::spawn(spec).wait();
  Result r;
  r.status = process::exit_code(st);
  int fo = open(out_path.c_str(), O_RDONLY), fe = open(err_path.c_str(), O_RDONLY);
  r.out = slurp(fo);
  r.err = slurp(fe);
  close(fo);
  close(fe);
  fs::remove_all(io);
  return r;
}

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Output parts that depend on the machine (file size: the metadata holds
// host name, time and command line) are masked before comparing.
std::string mask(std::string s) {
  s = std::regex_replace(s, std::regex(R"([0-9,]+ bytes, [0-9.]+ bytes/event)"), "<size>");
  s = std::regex_replace(s, std::regex(R"("file_bytes": [0-9]+)"), "\"file_bytes\": <size>");
  s = std::regex_replace(s, std::regex(R"("bytes_per_event": [0-9.e+-]+)"), "\"bytes_per_event\": <size>");
  return s;
}

void expect_golden(const std::string& actual, const std::string& name) {
  const std::string path = kData + "/" + name;
  if (std::getenv("HEAPLAB_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  EXPECT_EQ(actual, read_file(path)) << "golden file " << path << " differs (HEAPLAB_UPDATE_GOLDEN=1 rewrites it)";
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/heaplab_cli_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Imports testdata/small.cmt to DIR/small.hlt.
  void import_small() {
    Result r = run({"import", "--from", "cmt-text", kData + "/small.cmt", "-o", "small.hlt"}, dir_);
    ASSERT_EQ(r.status, 0) << r.err;
  }
  void killed_capture_stops_recording(bool reaped);
  std::string dir_;
};

// ------------------------------------------------------------ golden outputs

TEST_F(Cli, ImportReportsWhatItDid) {
  Result r = run({"import", "--from", "cmt-text", kData + "/small.cmt", "-o", "small.hlt"}, dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(mask(r.err), "imported 11 events from 13 lines of " + kData +
                             "/small.cmt into small.hlt (<size>)\n"
                             "heaplab: note: 1 frees of addresses never allocated were skipped (first at line 13)\n");
}

// An input with no heap calls imports as an empty trace, and says so.
TEST_F(Cli, AnEmptyImportIsSaid) {
  std::ofstream(dir_ + "/empty.txt").flush();
  const Result r = run({"import", "--from", "cmt-text", "empty.txt", "-o", "e.hlt"}, dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.err.find("heaplab: note: empty.txt held no heap calls: the trace is empty (the wrong file, or a log cut "
                       "before its first call?)\n"),
            std::string::npos)
      << r.err;
}

TEST_F(Cli, StatsTextGolden) {
  import_small();
  Result r = run({"stats", "small.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  expect_golden(mask(r.out), "small.stats.txt");
}

TEST_F(Cli, StatsJsonGolden) {
  import_small();
  Result r = run({"stats", "--json", "small.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  expect_golden(mask(r.out), "small.stats.json");
}

TEST_F(Cli, CatTextGolden) {
  import_small();
  Result r = run({"cat", "small.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  expect_golden(r.out, "small.cat.txt");
}

TEST_F(Cli, CatJsonlGolden) {
  import_small();
  Result r = run({"cat", "--format", "jsonl", "small.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  expect_golden(r.out, "small.cat.jsonl");
}

TEST_F(Cli, CatSlicesAndMetadata) {
  import_small();
  Result r = run({"cat", "--from", "3", "-n", "2", "small.hlt"}, dir_);
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "3 t0 malloc(70000) = #4\n4 t0 free(#2)\n");
  r = run({"cat", "--meta", "small.hlt"}, dir_);
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("\"format\": \"heaplab-trace\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"unknown_frees\": 1"), std::string::npos) << r.out;
}

// The Compact Memory Traces seed's own example for lifetimes.py (its
// comment): the same annotations, after the same 49 columns of line.
TEST_F(Cli, CatAnnotatesLifetimesAsTheSeed) {
  Result r = run({"import", "--from", "cmt-text", kData + "/seed-lifetimes.cmt", "-o", "seed.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run({"cat", "--annotate", "seed.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "0 t0 malloc(8) = #1\n"
            "1 t0 realloc(#1, 16) = #2                         # 8 bytes, allocated 1 lines ago\n"
            "2 t0 free(#2)                                     # 16 bytes, allocated 1 lines ago\n");
  r = run({"cat", "--annotate", "--format", "jsonl", "--from", "2", "seed.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "{\"old\":2,\"op\":\"free\",\"seq\":2,\"thread\":0,\"object_bytes\":16,\"age_events\":1}\n");
  // From a later event, or one thread of several, the ages still count from
  // where the objects were made (here: before --from).
  import_small();
  r = run({"cat", "--annotate", "--from", "4", "-n", "1", "small.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "4 t0 free(#2)                                     # 32 bytes, allocated 3 lines ago\n");
}

// A captured trace has timestamps: the age in ns too, and a free made by
// another thread than the allocation's is annotated under --thread.
TEST_F(Cli, CatAnnotatesAgesInNsAcrossThreads) {
  const std::string victim = HEAPLAB_TEST_BINARY_DIR "/capture/testprogs/victim_cpp";
  Result r = run({"capture", "-q", "-o", "t.hlt", "--", victim, "threads", "1", "1", "50"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run({"cat", "--annotate", "--thread", "2", "t.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::regex freed(R"(\d+ t2 @\d+ free\(#\d+\) +# \d+ bytes, allocated \d+ lines ago, \d+ ns ago\n)");
  size_t annotated = 0;
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), freed), end; it != end; ++it) ++annotated;
  EXPECT_EQ(annotated, 50u) << r.out.substr(0, 2000);
}

// Two traces side by side, one golden per format.
TEST_F(Cli, DiffOfTwoTracesGolden) {
  import_small();
  Result r = run({"import", "--from", "cmt-text", kData + "/seed-lifetimes.cmt", "-o", "seed.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* format : {"text", "md", "json"}) {
    r = run({"diff", "small.hlt", "seed.hlt", "--format", format}, dir_);
    ASSERT_EQ(r.status, 0) << r.err;
    expect_golden(r.out, std::string("diff.") + format);
  }
  // Two replay results: every metric both have, ratio, better or worse.
  ASSERT_EQ(run({"replay", "small.hlt", "--allocator", "glibc", "-o", "a.json"}, dir_).status, 0);
  ASSERT_EQ(run({"replay", "small.hlt", "--allocator", "jemalloc", "-o", "b.json"}, dir_).status, 0);
  r = run({"diff", "a.json", "b.json", "--format", "json"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["allocator_a"], "glibc");
  EXPECT_EQ(j["allocator_b"], "jemalloc");
  std::vector<std::string> metrics;
  for (const auto& row : j["rows"]) metrics.push_back(row["metric"]);
  EXPECT_EQ(metrics.front(), "wall_s");
  EXPECT_NE(std::find(metrics.begin(), metrics.end(), "heap_peak_mib"), metrics.end());
  r = run({"diff", "a.json", "b.json"}, dir_);
  EXPECT_EQ(r.out.find("heaplab diff: A a.json (glibc), B b.json (jemalloc); one replay each: no significance\n"), 0u)
      << r.out;
  r = run({"diff", "a.json", "small.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: diff: a.json is not a heaplab trace, and the other is: give two traces, two "
            "replay results or two sessions\n");
  r = run({"diff", "small.hlt", "nope.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: diff: nope.hlt: no such file (two traces, two replay results, or two session ids)\n");
  r = run({"diff", "small.hlt", "s1"}, dir_);
  EXPECT_EQ(r.err,
            "heaplab: error: diff: small.hlt is a file and s1 is not: give two traces, two replay results, or "
            "two session ids (--sessions)\n");
  r = run({"diff", "-", "small.hlt"}, dir_);
  EXPECT_EQ(r.err,
            "heaplab: error: diff: - is not a regular file (standard input is not read; --sessions for "
            "session ids)\n");
}

// A replay at the recorded pace of an hour-long run says so before it
// starts (here, cut short by --timeout).
TEST_F(Cli, LongPacedReplaySaysSoUpFront) {
  std::ofstream(dir_ + "/long.ht") << "v 10400 3\na 40 1\n+ 0\nc 36ee80\n- 0\n";  // an hour between the calls
  Result r = run({"import", "--from", "heaptrack", "long.ht", "-o", "long.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run({"replay", "long.hlt", "--timing", "recorded", "--timeout", "1"}, dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.find("heaplab: note: replaying at the recorded pace takes about 1 h 00 min (the program's own "
                       "run); --speed N or --timing fast shorten it; the --timeout of 1 s ends it first\n"),
            0u)
      << r.err;
}

TEST_F(Cli, CheckGolden) {
  import_small();
  Result r = run({"check", "small.hlt"}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "small.hlt: ok: 11 events, 1 thread, 6 objects\n");
}

TEST_F(Cli, RealTraceImportsWithExactCounts) {
  Result r =
      run({"import", "--from", "cmt-text", kSource + "/capture/testdata/cmt/456.hmmer.test.txt.bz2", "-o", "hmmer.hlt"},
          dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run({"stats", "--json", "hmmer.hlt"}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"malloc\": 90076"), std::string::npos);
  EXPECT_NE(r.out.find("\"free\": 90075"), std::string::npos);
  EXPECT_NE(r.out.find("\"realloc\": 65"), std::string::npos);
  EXPECT_NE(r.out.find("\"events\": 180216"), std::string::npos);
  r = run({"check", "hmmer.hlt"}, dir_);
  EXPECT_EQ(r.status, 0) << r.out;
}

// ------------------------------------------------------------ usage and errors

TEST_F(Cli, VersionAndHelp) {
  Result r = run({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "heaplab 0.1.0 (trace format 1.2)\n");
  for (const char* sub : {"import", "stats", "check", "cat"}) {
    r = run({sub, "--help"});
    EXPECT_EQ(r.status, 0) << sub;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
}

TEST_F(Cli, BadUsageExits2WithOneLine) {
  Result r = run({});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: A subcommand is required\nRun 'heaplab --help' for usage.\n");
  r = run({"stats", "--bogus", "x.hlt"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: The following argument was not expected: --bogus\n"
            "Run 'heaplab --help' for usage.\n");
  r = run({"import", "--from", "valgrind", "x", "-o", "y.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: unknown import format 'valgrind' (known: cmt-text, heaplab-raw, heaptrack, logalloc, "
            "mtrace, perf-pt)\n");
  r = run({"frobnicate"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.find("heaplab: error: unknown command 'frobnicate' (commands: "), 0u) << r.err;  // nothing near
  r = run({"replya", "x.hlt"});
  EXPECT_EQ(r.err.find("heaplab: error: unknown command 'replya', did you mean 'replay'? (commands: "), 0u) << r.err;
  // A mistyped command is named, also with --help (which used to print the
  // main help and exit 0).
  const std::string unknown =
      "heaplab: error: unknown command 'gaet', did you mean 'gate'? (commands: import, stats, check, cat, export, "
      "capture, "
      "replay, layout, run, report, gate, diff, dashboard, results)\nRun 'heaplab --help' for usage.\n";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"gaet"}, {"gaet", "--help"}}) {
    r = run(args);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err, unknown);
  }
}

// Output that cannot be written (a full device) is an error, not exit 0.
TEST_F(Cli, AFullOutputIsAnError) {
  import_small();
  const std::string t = dir_ + "/small.hlt";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"stats", t}, {"cat", t}, {"stats", "--json", t}}) {
    process::Spec spec;
    spec.argv = {kHeaplab};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.out = process::Stdio::file;
    spec.out_file = "/dev/full";
    spec.err = process::Stdio::pipe;
    const process::Output o = process::run(spec);
    EXPECT_EQ(process::exit_code(o.status), 2) << args[0];
    EXPECT_EQ(o.err, "heaplab: error: writing standard output: No space left on device\n") << args[0];
  }
}

// A program that never calls malloc is captured as such: its own status
// (0), and a trace of no calls that check accepts (issue 19: it was exit 2).
TEST_F(Cli, ProgramThatNeverAllocates) {
  Result r = run({"capture", "-q", "-o", "none.hlt", "--", "/bin/true"}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  r = run({"stats", "none.hlt"}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\nevents: 0 in 0 threads\n"), std::string::npos) << r.out;
  r = run({"check", "none.hlt"}, dir_);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
}

// A closed standard output is an error too, not a silent exit 0.
TEST_F(Cli, AClosedOutputIsAnError) {
  import_small();
  const std::string t = dir_ + "/small.hlt";
  for (const char* cmd : {"stats", "cat", "check"}) {
    process::Spec spec;
    spec.argv = {"/bin/sh", "-c", "exec \"$0\" \"$1\" \"$2\" >&-", kHeaplab, cmd, t};
    spec.err = process::Stdio::pipe;
    const process::Output o = process::run(spec);
    EXPECT_EQ(process::exit_code(o.status), 2) << cmd;
    EXPECT_EQ(o.err, "heaplab: error: writing standard output: Bad file descriptor\n") << cmd;
  }
}

TEST_F(Cli, CaptureTakesTheProgramWithOrWithoutDashes) {
  const std::string victim = std::string(HEAPLAB_TEST_BINARY_DIR) + "/capture/testprogs/victim_c";
  Result r = run({"capture", "-q", "-o", "a.hlt", "--", victim, "single"}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ + "/a.hlt"));
  r = run({"capture", "-q", "-o", "b.hlt", victim, "single"}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ + "/b.hlt"));
  // After --, even our own option names belong to the program; its status is ours.
  r = run({"capture", "-q", "-o", "c.hlt", "--", "/bin/sh", "-c", "exit 3", "--allocator"}, dir_);
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(fs::exists(dir_ + "/c.hlt"));
  r = run({"capture", "-q", "--bogus", "--", victim, "single"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: capture: unexpected arguments before --: --bogus\n");
  r = run({"capture", "-q", "--"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: capture: no program given (heaplab capture [options] -- PROGRAM [ARGS...])\n");
}

// Capture stopped on an error while the program ran on: capture says how
// many calls are missing and exits 3; check fails on the trace.
TEST_F(Cli, CaptureThatStoppedEarlyExitsThree) {
  const std::string victim = std::string(HEAPLAB_TEST_BINARY_DIR) + "/capture/testprogs/victim_c";
  Result r = run({"capture", "-o", "d.hlt", "--", victim, "closefds", "mine.txt"}, dir_);
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find("heaplab capture: victim_c exited with status 0 after"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("heaplab capture:   capture stopped: [0-9,]+ calls made after it are "
                                                  "missing from the trace \\(a `lost` event says so\\)\n")))
      << r.err;
  r = run({"check", "d.hlt"}, dir_);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("heaplab check: d.hlt: [0-9,]+ events lost in capture\n"))) << r.err;
}

// A raw directory that a killed capture of the same output left behind is
// named by the next capture, with the command that recovers its trace.
TEST_F(Cli, LeftoverRawDirectoryIsNamed) {
  const std::string victim = std::string(HEAPLAB_TEST_BINARY_DIR) + "/capture/testprogs/victim_c";
  const std::string left = dir_ + "/n.hlt.raw.2147483646";  // (no such process)
  fs::create_directory(left);
  std::ofstream(left + "/4242.0.hlraw") << "";
  fs::create_directory(dir_ + "/n.hlt.raw.2147483645");  // empty: nothing to recover
  const Result r = run({"capture", "-q", "-o", "n.hlt", "--", victim, "single"}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("heaplab capture: note: " + left +
                       " holds the raw files of an earlier capture of n.hlt whose heaplab was killed: `heaplab import "
                       "--from heaplab-raw " +
                       left + "/4242.0.hlraw -o TRACE` recovers its trace; remove the directory otherwise\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("2147483645"), std::string::npos) << r.err;
}

// `heaplab capture` killed (SIGKILL: nothing of it runs on): its program
// runs on, but stops recording at its next block, so the raw files stop
// growing instead of filling the disk. Also when nobody reaps the killed
// heaplab (a zombie still answers kill(pid, 0)).
TEST_F(Cli, KilledCaptureStopsTheProgramsRecording) {
  for (const bool reaped : {true, false}) {
    SCOPED_TRACE(reaped ? "reaped" : "a zombie");
    fs::remove_all(dir_ + "/raw");
    killed_capture_stops_recording(reaped);
  }
}

void Cli::killed_capture_stops_recording(bool reaped) {
  const std::string churn = std::string(HEAPLAB_TEST_BINARY_DIR) + "/capture/testprogs/churn";
  process::Spec spec;
  spec.argv = {kHeaplab, "capture", "--normalise", "after", "--raw-dir", "raw",
               "-o",     "k.hlt",   "--",          churn,   "1",         "400000000"};
  spec.cwd = dir_;
  spec.out = process::Stdio::null;
  spec.err = process::Stdio::null;
  process::Child heaplab = process::spawn(spec);
  auto blocks_bytes = [&]() -> uint64_t {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ + "/raw", ec))
      if (e.path().string().ends_with(".hlraw.blocks")) return fs::file_size(e.path(), ec);
    return 0;
  };
  for (int i = 0; i < 1000 && blocks_bytes() < (8u << 20); ++i) usleep(10000);
  ASSERT_GE(blocks_bytes(), 8u << 20) << "the capture never got going";
  uint32_t program = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/raw"))
    if (e.path().extension() == ".hlraw") program = uint32_t(std::stoul(e.path().filename().string()));
  ASSERT_GT(program, 0u);
  kill(heaplab.pid(), SIGKILL);
  if (reaped) heaplab.wait();
  usleep(200000);  // the program's threads reach their next block
  const uint64_t after_kill = blocks_bytes();
  usleep(500000);
  EXPECT_EQ(blocks_bytes(), after_kill) << "the orphaned program went on recording";
  EXPECT_EQ(kill(pid_t(program), 0), 0) << "the program itself should run on";
  kill(pid_t(program), SIGKILL);
  if (!reaped) heaplab.wait();
}

// The raw directory's file system fills while the program runs and the
// live reader is up, and the reader then stalls (SIGSTOP, 1 s): the shim
// waits for blocks the reader gives back (they free no disk space, so
// copying to .blocks instead would fail) and no call is lost. Before, the
// shim copied, waited 10 s for space that never came, and stopped capture
// with "Connection timed out" (its errno taken after a futex wait).
TEST_F(Cli, FullDiskWhileTheReaderStallsLosesNothing) {
  const SmallFs small(dir_ + "/fs");
  if (!small.why_not.empty()) GTEST_SKIP() << small.why_not;
  const std::string& mnt = small.path;
  const std::string churn = std::string(HEAPLAB_TEST_BINARY_DIR) + "/capture/testprogs/churn";
  process::Spec spec;
  spec.argv = {kHeaplab, "capture", "--raw-dir", mnt + "/raw", "-o", "f.hlt", "--", churn, "1", "6000000"};
  spec.cwd = dir_;
  spec.out = process::Stdio::null;
  spec.err = process::Stdio::file;
  spec.err_file = dir_ + "/err.txt";
  process::Child heaplab = process::spawn(spec);
  // The shim has sized its raw file (before, a fixed 400 ms: under ASan on
  // a busy machine the disk could fill before the program started, and
  // capture never began), then the reader is live and blocks go round.
  const auto raw_sized = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(mnt + "/raw", ec))
      if (e.path().extension() == ".hlraw" && e.file_size(ec) > 0) return true;
    return false;
  };
  for (int i = 0; i < 3000 && !raw_sized(); ++i) usleep(10000);
  ASSERT_TRUE(raw_sized()) << read_file(dir_ + "/err.txt");
  usleep(400000);
  {
    std::ofstream fill(mnt + "/filler", std::ios::binary);
    const std::string mib(1 << 20, 'x');
    while (fill.write(mib.data(), std::streamsize(mib.size())) && fill.flush()) {
    }
  }
  kill(heaplab.pid(), SIGSTOP);
  usleep(1000000);
  kill(heaplab.pid(), SIGCONT);
  const int status = heaplab.wait();
  const std::string err = read_file(dir_ + "/err.txt");
  EXPECT_EQ(process::exit_code(status), 0) << err;
  // (A shim and reader waiting on each other end the same way: after the
  // shim's 10 s limit for a reader that gives nothing back, capture stops.)
  EXPECT_EQ(err.find("stopped"), std::string::npos) << err;
  Result check = run({"check", "f.hlt"}, dir_);
  EXPECT_EQ(check.status, 0) << check.out << check.err;
}

// The raw directory's file system is full before the program starts: the
// program runs as it would have (its output and status), the shim counts
// its calls in heaplab's spare memfd, and the trace (written elsewhere)
// says how many were lost; capture exits 3 and check fails.
TEST_F(Cli, FullDiskBeforeTheStartCountsEveryCall) {
  const SmallFs small(dir_ + "/fs");
  if (!small.why_not.empty()) GTEST_SKIP() << small.why_not;
  const std::string& mnt = small.path;
  const std::string churn = std::string(HEAPLAB_TEST_BINARY_DIR) + "/capture/testprogs/churn";
  const Result room = run({"capture", "-o", "room.hlt", "--", churn, "1", "20000"}, dir_);
  ASSERT_EQ(room.status, 0) << room.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(room.err, m, std::regex("room.hlt: ([0-9,]+) calls in"))) << room.err;
  const std::string calls = m[1];
  {
    std::ofstream fill(mnt + "/filler", std::ios::binary);
    const std::string mib(1 << 20, 'x');
    while (fill.write(mib.data(), std::streamsize(mib.size())) && fill.flush()) {
    }
  }
  const Result full = run({"capture", "--raw-dir", mnt + "/raw", "-o", "full.hlt", "--", churn, "1", "20000"}, dir_);
  EXPECT_EQ(full.status, 3) << full.err;
  EXPECT_NE(full.err.find("capture could not start (No space left on device): all " + calls +
                          " heap calls are missing from the trace (a `lost` event counts them)"),
            std::string::npos)
      << full.err;
  const Result check = run({"check", "full.hlt"}, dir_);
  EXPECT_EQ(check.status, 1);
  EXPECT_NE(check.err.find("full.hlt: " + calls + " events lost in capture"), std::string::npos) << check.err;
}

// A FIFO with no writer (or a device) given as a trace: refused at once,
// never a wait in open() for a writer that may not come.
TEST_F(Cli, TraceThatIsAFifoIsRefusedAtOnce) {
  const std::string fifo = dir_ + "/fifo.hlt";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  for (const char* cmd : {"stats", "check", "cat", "replay"}) {
    const Result r = run({cmd, fifo}, dir_);
    EXPECT_EQ(r.status, 2) << cmd;
    EXPECT_NE(r.err.find(fifo + ": not a regular file (a trace is read from a file, not a pipe or device)\n"),
              std::string::npos)
        << cmd << ": " << r.err;
  }
  // Replay results (export, diff) and experiments likewise.
  import_small();
  const std::string json = dir_ + "/fifo.json", yaml = dir_ + "/fifo.yaml";
  ASSERT_EQ(mkfifo(json.c_str(), 0644), 0);
  ASSERT_EQ(mkfifo(yaml.c_str(), 0644), 0);
  Result r = run({"export", "--perfetto", "small.hlt", json, "-o", "x.pftrace"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: export: " + json +
                       ": not a regular file (a replay result is read from a file, not a pipe or device)\n");
  r = run({"run", yaml}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: " + yaml +
                       ": not a regular file (an experiment is read from a file, not a pipe or device)\n");
}

// A replay result past common/json.h's bounds is refused in one line
// before it is parsed (20 MB of '[' took diff and export to 1.5 GB).
TEST_F(Cli, AHugeResultIsRefusedBeforeParsing) {
  import_small();
  std::ofstream(dir_ + "/deep.json") << std::string(20'000'000, '[');
  std::ofstream(dir_ + "/nested.json") << std::string(100, '[') + std::string(100, ']');
  Result r = run({"export", "--perfetto", "small.hlt", "deep.json", "-o", "x.pftrace"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: export: deep.json: 20000000 bytes, more than the 16 MiB a replay result may have\n");
  r = run({"diff", "nested.json", "nested.json"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: diff: nested.json: not read: nested deeper than 64 levels\n");
}

// A negative count is refused, not wrapped into a huge unsigned one.
TEST_F(Cli, NegativeCountsAreRefused) {
  struct Case {
    std::vector<std::string> args;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{"cat", "--from", "-3", "x.hlt"}, "heaplab: error: --from: not a count: -3\n"},
           {{"cat", "-n", "-2", "x.hlt"}, "heaplab: error: --limit: not a count: -2\n"},
           {{"check", "--max-problems", "-1", "x.hlt"}, "heaplab: error: --max-problems: not a count: -1\n"},
           {{"replay", "x.hlt", "--timeout", "-1"},
            "heaplab: error: --timeout: expected a number of seconds above 0, not '-1'\n"}}) {
    const Result r = run(c.args, dir_);
    EXPECT_EQ(r.status, 2) << c.args[0];
    EXPECT_EQ(r.err.substr(0, r.err.find('\n') + 1), c.err);
  }
}

TEST_F(Cli, CaptureRefusesBeforeRunning) {
  Result r = run({"capture", "-o", "x.hlt", "--", "no-such-program-xyz"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: capture: program 'no-such-program-xyz' not found in PATH\n");
  r = run({"capture", "--allocator", "nosuch", "-o", "x.hlt", "--", "true"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: capture: allocator 'nosuch': unknown name (known: glibc, jemalloc, mimalloc, "
            "tcmalloc; or give the path of a .so)\n");
  r = run({"capture", "-o", "/nonexistent-dir/x.hlt", "--", "true"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: capture: cannot write output '/nonexistent-dir/x.hlt': No such file or directory\n");
  r = run({"import", "--from", "heaplab-raw", "/nonexistent.hlraw", "-o", "x.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: /nonexistent.hlraw: No such file or directory\n");
  EXPECT_FALSE(fs::exists(dir_ + "/x.hlt"));
}

// An output that names a file the command reads (by its inode: through a
// link too) is refused before anything is written; the input is left as it
// was. Before, each of these replaced its input (a trace by a replay's
// JSON, a source log by its trace, the program by its own capture).
TEST_F(Cli, AnOutputThatIsAnInputIsRefused) {
  ASSERT_EQ(run({"import", "--from", "cmt-text", kData + "/small.cmt", "-o", "t.hlt"}, dir_).status, 0);
  fs::copy_file(kData + "/small.cmt", dir_ + "/s.cmt");
  fs::create_symlink("t.hlt", dir_ + "/link.hlt");
  const auto size = [&](const std::string& f) { return fs::file_size(dir_ + "/" + f); };
  const uint64_t trace_bytes = size("t.hlt"), source_bytes = size("s.cmt");
  const struct {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"replay", "t.hlt", "-q", "-o", "t.hlt"},
       "replay: 't.hlt' is the input 't.hlt': it would be replaced (name another output)"},
      {{"replay", "t.hlt", "-q", "-o", "link.hlt"},
       "replay: 'link.hlt' is the input 't.hlt': it would be replaced (name another output)"},
      {{"replay", "t.hlt", "-q", "--emit-trace", "t.hlt"},
       "replay: --emit-trace: 't.hlt' is the input 't.hlt': it would be replaced (name another output)"},
      {{"replay", "t.hlt", "-q", "--emit-trace", "e.hlt", "-o", "./e.hlt"},
       "replay: -o and --emit-trace name the same file './e.hlt' (the trace would be replaced)"},
      {{"export", "--perfetto", "t.hlt", "-o", "t.hlt"},
       "export: 't.hlt' is the input 't.hlt': it would be replaced (name another output)"},
      {{"import", "--from", "cmt-text", "s.cmt", "-o", "s.cmt"},
       "import: 's.cmt' is the input 's.cmt': it would be replaced (name another output)"},
  };
  for (const auto& c : cases) {
    const Result r = run(c.args, dir_);
    EXPECT_EQ(r.status, 2) << c.err;
    EXPECT_EQ(r.err, "heaplab: error: " + c.err + "\n");
  }
  EXPECT_EQ(size("t.hlt"), trace_bytes);
  EXPECT_EQ(size("s.cmt"), source_bytes);
  EXPECT_FALSE(fs::exists(dir_ + "/e.hlt"));
  EXPECT_EQ(run({"check", "t.hlt"}, dir_).status, 0);
  // The program captured.
  fs::copy_file("/bin/true", dir_ + "/prog");
  fs::permissions(dir_ + "/prog", fs::perms::owner_all);
  const uint64_t prog_bytes = size("prog");
  const Result r = run({"capture", "-q", "-o", "prog", "--", "./prog"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: capture: output 'prog' is the input './prog' (the program): it would be replaced (name "
            "another output)\n");
  EXPECT_EQ(size("prog"), prog_bytes);
}

// cat --memory takes --thread, --from, -n and --format as cat of events
// does (they were ignored); --meta takes none of them (refused, not ignored).
TEST_F(Cli, CatOfMemoryRecordsTakesTheSameOptions) {
  const std::string victim = std::string(HEAPLAB_TEST_BINARY_DIR) + "/capture/testprogs/victim_c";
  ASSERT_EQ(run({"capture", "-q", "--latency", "1", "-o", "m.hlt", "--", victim, "single"}, dir_).status, 0);
  const auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  const Result all = run({"cat", "m.hlt", "--memory"}, dir_);
  ASSERT_EQ(all.status, 0);
  ASSERT_GT(lines(all.out), 3);
  Result r = run({"cat", "m.hlt", "--memory", "-n", "2"}, dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, all.out.substr(0, all.out.find('\n', all.out.find('\n') + 1) + 1));
  r = run({"cat", "m.hlt", "--memory", "--format", "jsonl", "-n", "1"}, dir_);
  EXPECT_EQ(r.out.rfind("{\"op\":\"latency\",\"seq\":", 0), 0u) << r.out;
  EXPECT_EQ(lines(r.out), 1);
  EXPECT_TRUE(nlohmann::json::parse(r.out).contains("ns")) << r.out;
  r = run({"cat", "m.hlt", "--memory", "--from", "1000000"}, dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "");
  r = run({"cat", "m.hlt", "--memory", "--thread", "99"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.rfind("heaplab: error: m.hlt: no thread 99 (the trace has ", 0), 0u) << r.err;
  r = run({"cat", "m.hlt", "--meta", "-n", "3"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: cat: --meta prints the metadata alone: none of --memory, --annotate, --thread, --from, "
            "-n, --format with it\n");
}

TEST_F(Cli, MissingInputsExit2) {
  Result r = run({"stats", "/nonexistent.hlt"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: /nonexistent.hlt: cannot open: No such file or directory\n");
  r = run({"import", "--from", "cmt-text", "/nonexistent.txt", "-o", "x.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: /nonexistent.txt: cannot open: No such file or directory\n");
  EXPECT_FALSE(fs::exists(dir_ + "/x.hlt"));
}

TEST_F(Cli, GarbageImportNamesTheLineAndLeavesNoOutput) {
  std::ofstream(dir_ + "/bad.txt") << "malloc(8) = 0x10\nfree(0x10)\nthis is not a call\n";
  Result r = run({"import", "--from", "cmt-text", "bad.txt", "-o", "out.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: bad.txt:3: unknown call 'this': \"this is not a call\"\n");
  EXPECT_FALSE(fs::exists(dir_ + "/out.hlt"));
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().string().find(".part"), std::string::npos) << entry.path();
}

TEST_F(Cli, UnwritableOutputExits2) {
  Result r = run({"import", "--from", "cmt-text", kData + "/small.cmt", "-o", "/nonexistent-dir/o.hlt"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(std::regex_match(
      r.err, std::regex("heaplab: error: /nonexistent-dir/o\\.hlt\\.heaplab-[0-9]+\\.part: cannot create: "
                        "No such file or directory\n")))
      << r.err;
  r = run({"import", "--from", "cmt-text", kData + "/small.cmt", "-o", "x.hlt", "--level", "30"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: --level: zstd levels are 1 to 22 (got 30)\n");
}

TEST_F(Cli, CorruptAndTruncatedTraces) {
  import_small();
  std::string img = read_file(dir_ + "/small.hlt");
  // Wrong magic.
  std::string bad = img;
  bad[0] = 'X';
  std::ofstream(dir_ + "/magic.hlt", std::ios::binary) << bad;
  Result r = run({"stats", "magic.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: magic.hlt: offset 0: not a heaplab trace (bad magic)\n");
  // A flipped byte in the middle: an error naming an offset, exit 2.
  bad = img;
  bad[img.size() / 2] ^= 0x10;
  std::ofstream(dir_ + "/flip.hlt", std::ios::binary) << bad;
  for (const char* cmd : {"stats", "check", "cat"}) {
    r = run({cmd, "flip.hlt"}, dir_);
    EXPECT_EQ(r.status, 2) << cmd;
    EXPECT_TRUE(std::regex_match(r.err, std::regex("heaplab: error: flip.hlt: offset [0-9]+: .*\n")))
        << cmd << ": " << r.err;
  }
  // Truncated: readable with a warning; check fails with exit 1.
  std::ofstream(dir_ + "/cut.hlt", std::ios::binary) << img.substr(0, img.size() - 40);
  r = run({"stats", "cut.hlt"}, dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.err.rfind("heaplab: warning: cut.hlt: trace is truncated", 0), 0u) << r.err;
  r = run({"check", "cut.hlt"}, dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "heaplab check: cut.hlt: 1 problem found\n");
  EXPECT_EQ(r.out.rfind("cut.hlt: seq 0 (thread 0): trace is truncated", 0), 0u) << r.out;
}

TEST_F(Cli, CatOfAMissingThread) {
  import_small();
  Result r = run({"cat", "--thread", "3", "small.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: small.hlt: no thread 3 (the trace has 1)\n");
  r = run({"cat", "--thread", "-7", "small.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: --thread: no thread -7\n");
  // (-1 was the value of "every thread", and printed them all.)
  r = run({"cat", "--thread", "-1", "small.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: --thread: no thread -1\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(Cli, ImportFromStdinAndEveryCodec) {
  const std::string src = kData + "/small.cmt";
  for (const char* codec : {"zstd", "lz4", "none"}) {
    Result r = run({"import", "--from", "cmt-text", src, "--codec", codec, "-o", std::string(codec) + ".hlt"}, dir_);
    ASSERT_EQ(r.status, 0) << codec << r.err;
    r = run({"cat", std::string(codec) + ".hlt"}, dir_);
    expect_golden(r.out, "small.cat.txt");
  }
}

}  // namespace

// ------------------------------------------------------------ Intel PT route

namespace pt_cli {

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// Two threads of malloc/free pairs; thread 2 lost its events 10..14.
std::vector<uint8_t> recording() {
  std::vector<heaplab::pt::SynthThread> th(2);
  for (uint32_t t = 0; t < 2; ++t) {
    th[t].pid = 777;
    th[t].tid = 777 + t;
    th[t].comm = t ? "worker" : "server";
    for (uint32_t i = 0; i < 100; ++i) {
      heaplab::pt::PtwEvent e;
      e.seq = i;
      e.tsc = 1000000 + i * 100 + t * 7;
      e.op = i % 2 ? 22 : 0;  // free, malloc
      e.a = 0x10000 + t * 0x1000 + (i / 2) * 16;
      e.b = i % 2 ? 0 : 24;
      if (!(t == 1 && i >= 10 && i < 15)) th[t].events.push_back(e);
    }
  }
  return heaplab::pt::synth_perf_data(th, {});
}

}  // namespace pt_cli

// These VMs have no Intel PT: capture --method pt says so before running anything.
TEST_F(Cli, CaptureMethodPtFailsFastWithoutPt) {
  if (fs::exists("/sys/bus/event_source/devices/intel_pt")) GTEST_SKIP() << "this machine has Intel PT";
  Result r = run({"capture", "--method", "pt", "-o", "x.hlt", "--", "touch", "ran"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: capture: --method pt: this machine has no Intel PT (no "
            "/sys/bus/event_source/devices/intel_pt: not an Intel CPU with Processor Trace, or a virtual machine that "
            "hides it); use --method software (or --pt-fallback software)\n");
  EXPECT_FALSE(fs::exists(dir_ + "/ran"));
  EXPECT_FALSE(fs::exists(dir_ + "/x.hlt"));
}

// A perf.data recorded elsewhere: decoded, losses said and marked, the same
// trace from every decoder.
TEST_F(Cli, ImportPerfPt) {
  pt_cli::write_bytes(dir_ + "/perf.data", pt_cli::recording());
  Result r = run({"import", "--from", "perf-pt", "perf.data", "-o", "direct.hlt"}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::regex_replace(mask(r.err), std::regex(R"(in [0-9.]+ s;)"), "in <t> s;"),
            "decoded 195 events (975 ptwrite payloads) of process 777 (server) in 2 threads with the direct decoder "
            "in <t> s; wrote direct.hlt (<size>)\n"
            "heaplab: note: 5 events lost (lost markers in the trace): 0 overflow packets, 0 truncated AUX records, "
            "0 AUX gaps\n"
            "heaplab: note: 1 frees of memory whose allocation is not in the trace (made before capture, or lost) "
            "were skipped\n");             // malloc #14 was lost, its free #15 was not
  r = run({"check", "direct.hlt"}, dir_);  // consistent, but not the whole run: fails
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("direct.hlt: the capture lost 5 events (lost markers): the trace is not the program's whole "
                       "run\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.err, "heaplab check: direct.hlt: 5 events lost in capture\n");
  const std::string direct = run({"cat", "direct.hlt"}, dir_).out;
  EXPECT_NE(direct.find("lost(5)"), std::string::npos) << direct.substr(0, 2000);
  for (const char* dec : {"dlfilter", "text"}) {
    r = run({"import", "--from", "perf-pt", "--decoder", dec, "perf.data", "-o", std::string(dec) + ".hlt"}, dir_);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(run({"cat", std::string(dec) + ".hlt"}, dir_).out, direct) << dec;
  }
  r = run({"import", "--from", "perf-pt", "--pid", "5", "perf.data", "-o", "x.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: perf.data: no heaplab events of process 5\n");
  pt_cli::write_bytes(dir_ + "/junk.data", std::vector<uint8_t>(64, 1));
  r = run({"import", "--from", "perf-pt", "junk.data", "-o", "x.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "heaplab: error: junk.data: not a perf.data file (no PERFILE2 magic)\n");
  r = run({"import", "--from", "perf-pt", "--decoder", "text", "--perf", "/no/perf", "perf.data", "-o", "x.hlt"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "heaplab: error: cannot run /no/perf: No such file or directory (the dlfilter and text decoders need "
            "perf: apt-get install linux-perf)\n");
  EXPECT_FALSE(fs::exists(dir_ + "/x.hlt"));
}
