// An experiment file (YAML): traces x allocators x replay settings x
// repetitions. Validated whole before anything runs; every error is one
// line naming the file, the line and the key.
//
//   name: quick-start                # default: the file's name without .yaml
//   description: free text
//   traces:                          # each: a file, or a program captured first
//     - name: sqlite3
//       capture: [sqlite3, ":memory:", "-cmd", ".read scripts/sqlite3-workload.sql"]
//       capture_allocator: glibc     # optional: the allocator the program runs on while captured
//     - name: hmmer
//       file: results/456.hmmer.hlt
//   allocators:                      # each: a known name or the path of a .so
//     - name: jemalloc
//       load: direct                 # preload (default) or direct
//       env: {MALLOC_CONF: "narenas:1"}
//       label: jemalloc-1arena       # default: name, or name/direct
//   replay: {threads: 0, touch: recorded, timing: recorded, speed: 1, pin: none, membind: none,
//            latency: 16, latency_of: every, sample_ms: 10}
//                                    # experiments default to timing: recorded (the
//                                    # replay's own default is fast): memory measures best so
//   metrics: [wall_s, heap_peak_mib] # default: experiments/metrics.h default_metrics()
//   repetitions: 5                   # measured runs per trace and allocator
//   warmup: 1                        # runs before them, stored but not reported
//   baseline: glibc                  # an allocator label; default: the first
//
// Relative paths (a trace `file`, the program's arguments) are taken from
// the directory heaplab runs in, as in a shell; `{experiment_dir}` in them
// stands for the directory of the experiment file, so a file can name
// things next to it wherever heaplab runs.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "replay/settings.h"

namespace heaplab::experiments {

class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TraceSpec {
  std::string name;
  std::string file;                  // a trace file, or
  std::vector<std::string> capture;  // a program and its arguments, captured first
  std::string capture_allocator = "glibc";
};

struct AllocatorSpec {
  std::string label;
  std::string name;  // known name or .so path
  std::string load = "preload";
  std::vector<std::pair<std::string, std::string>> env;
};

// The replay settings of every run (replay/settings.h: one type and one
// table for the CLI, experiment files and the replayer).
using ReplaySettings = replay::ReplaySettings;

// Runs (traces x allocators x (warmup + repetitions)) one experiment may
// have: its cells are held in memory, each a replay of seconds or more.
inline constexpr uint64_t kMaxRuns = 1000000;

struct ExperimentSpec {
  std::string path;  // the file
  std::string name;
  std::string description;
  std::string text;  // the file's contents, as stored with the results
  std::vector<TraceSpec> traces;
  std::vector<AllocatorSpec> allocators;
  ReplaySettings replay;
  std::vector<std::string> metrics;
  uint32_t repetitions = 5;
  uint32_t warmup = 1;
  std::string baseline;
  // Seconds a run may take before it is killed and counted failed (a hung
  // allocator); 0: replay::default_timeout_s of its trace.
  double timeout_s = 0;
};

// Reads and validates `path`; throws SpecError("PATH:LINE: ...").
ExperimentSpec load_experiment(const std::string& path);
// The same from text (`path` names it in errors).
ExperimentSpec parse_experiment(const std::string& text, const std::string& path);

}  // namespace heaplab::experiments
