// Experiment files: what a valid one gives, and one line naming the file,
// the line and the key for each kind of mistake.
#include "experiments/spec.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace heaplab::experiments {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_experiment(yaml, "exp.yaml");
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

// Found by reading (the fuzz target's path is fixed): a directory named with
// the placeholder itself expanded forever.
TEST(Spec, ExperimentDirInTheDirectoryNameExpandsOnce) {
  const ExperimentSpec s = parse_experiment(
      "traces: [{name: t, file: '{experiment_dir}/x.hlt'}]\nallocators: [glibc]\n", "/tmp/{experiment_dir}/exp.yaml");
  EXPECT_EQ(s.traces[0].file, "/tmp/{experiment_dir}/x.hlt");
}

TEST(Spec, AValidExperiment) {
  const ExperimentSpec s = parse_experiment(
      "name: settings\n"
      "traces:\n"
      "  - name: app\n"
      "    capture: [sqlite3, ':memory:', '.read {experiment_dir}/w.sql']\n"
      "    capture_allocator: jemalloc\n"
      "  - {name: hmmer, file: results/456.hmmer.hlt}\n"
      "allocators:\n"
      "  - glibc\n"
      "  - name: jemalloc\n"
      "    load: direct\n"
      "    env: {MALLOC_CONF: 'narenas:1', JEMALLOC_X: 3}\n"
      "  - {name: jemalloc, label: je-default}\n"
      "replay: {threads: 2, touch: all, timing: recorded, speed: 2.5, pin: compact, latency: 16, sample_ms: 5}\n"
      "metrics: [wall_s, heap_peak_mib]\n"
      "repetitions: 7\n"
      "warmup: 0\n"
      "baseline: je-default\n",
      "exp.yaml");
  EXPECT_EQ(s.name, "settings");
  ASSERT_EQ(s.traces.size(), 2u);
  EXPECT_EQ(s.traces[0].capture, (std::vector<std::string>{"sqlite3", ":memory:", ".read ./w.sql"}));
  EXPECT_EQ(s.traces[0].capture_allocator, "jemalloc");
  EXPECT_EQ(s.traces[1].file, "results/456.hmmer.hlt");
  ASSERT_EQ(s.allocators.size(), 3u);
  EXPECT_EQ(s.allocators[0].label, "glibc");
  EXPECT_EQ(s.allocators[1].label, "jemalloc/direct");
  EXPECT_EQ(s.allocators[1].env,
            (std::vector<std::pair<std::string, std::string>>{{"MALLOC_CONF", "narenas:1"}, {"JEMALLOC_X", "3"}}));
  EXPECT_EQ(s.allocators[2].label, "je-default");
  EXPECT_EQ(s.replay.threads, 2u);
  EXPECT_EQ(s.replay.touch, replay::Touch::all);
  EXPECT_EQ(s.replay.timing, replay::Timing::recorded);
  EXPECT_DOUBLE_EQ(s.replay.speed, 2.5);
  EXPECT_EQ(s.replay.latency, 16u);
  EXPECT_EQ(s.replay.sample_ms, 5u);
  EXPECT_EQ(s.metrics, (std::vector<std::string>{"wall_s", "heap_peak_mib"}));
  EXPECT_EQ(s.repetitions, 7u);
  EXPECT_EQ(s.warmup, 0u);
  EXPECT_EQ(s.baseline, "je-default");
  // Defaults: the name from the file, the first allocator as baseline.
  const ExperimentSpec d =
      parse_experiment("traces: [{name: t, file: x.hlt}]\nallocators: [glibc, mimalloc]\n", "dir/quick-start.yaml");
  EXPECT_EQ(
      parse_experiment("traces: [{name: t, file: '{experiment_dir}/x.hlt'}]\nallocators: [glibc]\n", "/exp/dir/e.yaml")
          .traces[0]
          .file,
      "/exp/dir/x.hlt");
  // In allocators' paths and env values too (a label made from the path).
  const ExperimentSpec al = parse_experiment(
      "traces: [{name: t, file: x.hlt}]\nallocators: [{name: '{experiment_dir}/lib/my.so', env: {CONF: "
      "'{experiment_dir}/conf'}}]\n",
      "/exp/dir/e.yaml");
  EXPECT_EQ(al.allocators[0].name, "/exp/dir/lib/my.so");
  EXPECT_EQ(al.allocators[0].label, "my.so");
  ASSERT_EQ(al.allocators[0].env.size(), 1u);
  EXPECT_EQ(al.allocators[0].env[0].second, "/exp/dir/conf");
  EXPECT_EQ(d.name, "quick-start");
  EXPECT_EQ(d.baseline, "glibc");
  EXPECT_EQ(d.repetitions, 5u);
  EXPECT_EQ(d.warmup, 1u);
  EXPECT_EQ(d.replay.touch, replay::Touch::recorded);
  EXPECT_EQ(d.replay.timing, replay::Timing::recorded);  // experiments measure memory: at the recorded pace
}

// A junk line of 10 MB is quoted by its first 80 characters and its size,
// not echoed whole (issue 19). (1 MB here: yaml-cpp scans it a character
// at a time, slowly under the sanitizers.)
TEST(Spec, AHugeJunkValueIsNotEchoedWhole) {
  const std::string junk(1'000'000, 'x');
  EXPECT_EQ(error_of(junk + "\n"), "exp.yaml:1: expected a map of keys (name, traces, allocators, ...), not '" +
                                       junk.substr(0, 80) + "...' (1,000,000 bytes)");
  EXPECT_EQ(error_of("traces: [{name: t, file: x.hlt}]\nallocators: [glibc]\nbaseline: " + junk + "\n"),
            "exp.yaml:3: 'baseline': no allocator labelled '" + junk.substr(0, 80) +
                "...' (1,000,000 bytes) (labels: glibc)");
}

TEST(Spec, MistakesNameTheLineAndKey) {
  const std::string ok_traces = "traces: [{name: t, file: x.hlt}]\n";
  const std::string ok_allocs = "allocators: [glibc]\n";
  // Found by spec_fuzz: a path ending in '/' made an empty label (and the baseline '').
  EXPECT_EQ(error_of(ok_traces + "allocators: [lib/]\n"),
            "exp.yaml:2: cannot make a label of 'lib/' (give it a 'label': letters, digits, '.', '_', '-' and '/')");
  EXPECT_EQ(
      error_of(ok_traces + "allocators: ['./a|b.so']\n"),
      "exp.yaml:2: cannot make a label of './a|b.so' (give it a 'label': letters, digits, '.', '_', '-' and '/')");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "repetiton: 3\n"),
            "exp.yaml:3: unknown key 'repetiton' (known: name, description, traces, allocators, replay, metrics, "
            "repetitions, warmup, baseline, timeout)");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "repetitions: 3\nrepetitions: 5\n"),
            "exp.yaml:4: duplicate key 'repetitions' (first at line 3)");
  EXPECT_EQ(error_of(ok_traces + "allocators:\n  - {name: glibc, label: a, label: b}\n"),
            "exp.yaml:3: duplicate key 'label' (first at line 3)");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "timeout: 0\n"),
            "exp.yaml:3: 'timeout': expected a whole number from 1 to 604800, not '0'");
  std::string many = "traces:\n";
  for (int i = 0; i < 100; ++i) many += "  - {name: t" + std::to_string(i) + ", file: x.hlt}\n";
  EXPECT_EQ(error_of(many + ok_allocs + "repetitions: 10000\nwarmup: 1000\n"),
            "exp.yaml:103: the experiment has 1100000 runs (100 traces x 1 allocators x 11000 rounds of warmup and "
            "repetitions), more than the 1000000 one experiment may have: split it");
  EXPECT_EQ(error_of(many + ok_allocs + "repetitions: 9000\nwarmup: 1000\n"), "");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "repetitions: five\n"),
            "exp.yaml:3: 'repetitions': expected a whole number from 1 to 10000, not 'five'");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "repetitions: 0\n"),
            "exp.yaml:3: 'repetitions': expected a whole number from 1 to 10000, not '0'");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "replay:\n  touch: most\n"),
            "exp.yaml:4: 'touch': expected one of none, first, pages, all, recorded, not 'most'");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "replay:\n  threds: 2\n"),
            "exp.yaml:4: unknown key 'threds' in replay (known: threads, touch, timing, speed, pin, membind, "
            "latency, latency_of, sample_ms)");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "replay: {pin: fast}\n"),
            "exp.yaml:3: 'pin': expected none, compact, scatter or a list of CPU numbers such as 0,2, not 'fast'");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "replay: {membind: local}\n"),
            "exp.yaml:3: 'membind': local binds memory to the pinned CPUs' nodes; give 'pin' too");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "replay: {membind: '0,,1'}\n"),
            "exp.yaml:3: 'membind': expected none, local, interleave or a list of NUMA nodes such as 0,1, not '0,,1'");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "replay: fast\n"),
            "exp.yaml:3: 'replay': expected a map of keys and values, not 'fast'");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "metrics: [wall_s, speed]\n"),
            "exp.yaml:3: 'metrics': unknown metric 'speed' (known: wall_s, mcalls_per_s, cpu_s, heap_peak_mib, "
            "heap_at_live_peak_mib, frag_at_live_peak, frag_time_weighted, heap_final_mib, peak_rss_mib, "
            "minor_faults, malloc_p50_ns, malloc_p99_ns, malloc_p999_ns, free_p50_ns, free_p99_ns)");
  EXPECT_EQ(error_of(ok_traces + ok_allocs + "baseline: jemalloc\n"),
            "exp.yaml:3: 'baseline': no allocator labelled 'jemalloc' (labels: glibc)");
  EXPECT_EQ(error_of(ok_allocs), "exp.yaml:1: no 'traces' (a list of trace files or programs to capture)");
  EXPECT_EQ(error_of(ok_traces), "exp.yaml:1: no 'allocators' (a list of allocators to replay on)");
  EXPECT_EQ(error_of("traces:\n  - name: t\n    file: a.hlt\n    capture: [ls]\n" + ok_allocs),
            "exp.yaml:2: trace 't': give either 'file' or 'capture', one of them");
  EXPECT_EQ(error_of("traces:\n  - {name: t, file: a}\n  - {name: t, file: b}\n" + ok_allocs),
            "exp.yaml:3: trace 't' named twice");
  EXPECT_EQ(error_of("traces:\n  - file: a\n" + ok_allocs), "exp.yaml:2: a trace without 'name'");
  EXPECT_EQ(error_of(ok_traces + "allocators: [glibc, glibc]\n"),
            "exp.yaml:2: two allocators labelled 'glibc' (give each a 'label')");
  EXPECT_EQ(error_of(ok_traces + "allocators:\n  - name: jemalloc\n    load: sideways\n"),
            "exp.yaml:4: 'load': expected one of preload, direct, not 'sideways'");
  EXPECT_EQ(error_of(ok_traces + "allocators:\n  - name: jemalloc\n    env: [a]\n"),
            "exp.yaml:4: 'env': expected a map of keys and values, not a list");
  EXPECT_EQ(error_of("traces: [\n"), "exp.yaml:2: not valid YAML: end of sequence flow not found");
  EXPECT_EQ(error_of("- a\n- b\n"), "exp.yaml:1: expected a map of keys (name, traces, allocators, ...), not a list");
  EXPECT_EQ(error_of("name: 'a b'\n" + ok_traces + ok_allocs),
            "exp.yaml:1: 'name': letters, digits, '.', '_' and '-' only, not 'a b'");
  try {
    load_experiment("/nonexistent/x.yaml");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/x.yaml: cannot open: No such file or directory");
  }
  // A FIFO with no writer is refused at once, not waited on in open().
  const std::string fifo = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/heaplab_spec_fifo." +
                           std::to_string(getpid());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  try {
    load_experiment(fifo);
    ADD_FAILURE();
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()),
              fifo + ": not a regular file (an experiment is read from a file, not a pipe or device)");
  }
  unlink(fifo.c_str());
}

}  // namespace
}  // namespace heaplab::experiments
