// `heaplab run FILE.yaml`: runs an experiment's matrix into the results
// store. Traces to capture are captured first (once per session); then
// every (repetition, trace, allocator) cell is one `run_replay` (the
// replay in a fresh process), in an order that spreads noise: warm-up
// rounds, then measured rounds, each round every trace on every
// allocator, the allocators' order rotated from round to round. Each run
// is stored as soon as it ends, so an interrupted experiment resumes
// where it stopped (the same command again), and `--shard K/N` runs every
// N-th cell for a batch scheduler's job array (`heaplab results merge`
// joins the stores).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/spec.h"

namespace heaplab::experiments {

class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RunnerOptions {
  std::string results_dir = "results";
  std::string shard;    // "K/N" (1-based), or "" for the whole matrix; needs `session`
  std::string session;  // resume or start this session id (every shard of a run gives the same one);
                        // "" = resume an unfinished session of the same file no live heaplab runs, or start anew
  bool fresh = false;   // start a new session even if an unfinished one matches
  bool quiet = false;
  std::string replayer_dir;  // for tests; "" = next to heaplab
};

struct Cell {
  size_t trace = 0, allocator = 0;
  uint32_t rep = 0;
  bool warmup = false;
  int64_t seq = 0;
  std::string key;  // "trace|allocator|r3" (w: warm-up)
};

// The whole matrix in run order.
std::vector<Cell> matrix(const ExperimentSpec& spec);
// "K/N" -> {K, N}; throws RunError for anything else.
std::pair<uint32_t, uint32_t> parse_shard(const std::string& s);

struct RunnerResult {
  std::string session;
  std::string store;      // the database's path
  int64_t cells = 0;      // in the session (all shards)
  int64_t ran = 0;        // replays run now
  int64_t already = 0;    // found stored (resumed)
  int64_t failed = 0;     // stored runs of the session (now or before) that crashed, failed or were not faithful
  bool finished = false;  // every cell of the session is stored
  bool interrupted = false;
};

// Throws SpecError/RunError (one line) for what stops the experiment
// before or while it runs: a missing trace file, an allocator that is not
// installed, a capture that failed, an unreadable store.
RunnerResult run_experiment(const ExperimentSpec& spec, const RunnerOptions& opt);

// The git commit heaplab was built from ("" if unknown).
std::string heaplab_git_commit();

}  // namespace heaplab::experiments
