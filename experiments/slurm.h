// `heaplab run FILE.yaml --slurm N`: an experiment as a Slurm job array, one
// task per shard (`heaplab run --shard K/N --session ID`, each into a store
// of its own), then a merge job that depends on the array (afterany: a
// shard whose runs failed still stored them) and joins the shards' stores
// into the results store (`heaplab results merge`), then prints the
// session's report. The two batch scripts, the shards' stores and every
// log are kept in RESULTS/slurm/SESSION/, so a job can be read, rerun or
// submitted by hand. Trace files, the experiment file, heaplab and the
// results directory must be on a file system every node sees (paths are
// made absolute).
#pragma once

#include <string>
#include <vector>

#include "experiments/spec.h"

namespace heaplab::experiments {

struct SlurmOptions {
  std::string experiment_file;  // as given to heaplab run
  std::string results_dir = "results";
  uint32_t shards = 1;
  std::string session;                   // "" = EXPERIMENT-TIME-slurm
  std::vector<std::string> sbatch_args;  // passed to both sbatch commands (e.g. --partition=big)
  std::string sbatch = "sbatch";         // the command
  bool wait = false;                     // wait for the merge job (sbatch --wait)
};

struct SlurmSubmission {
  std::string session, dir;          // the session id; RESULTS/slurm/SESSION
  std::string array_job, merge_job;  // Slurm job ids
  int merge_exit = -1;               // with wait: the merge job's exit code
  std::string report;                // with wait: the merge job's output (the session's report)
};

class SlurmError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The batch scripts (for the test and for reading): the job array's and the merge job's.
std::string shard_script(const SlurmOptions& opt, const std::string& heaplab, const std::string& session,
                         const std::string& dir, const std::string& cwd, const std::string& experiment_name);
std::string merge_script(const SlurmOptions& opt, const std::string& heaplab, const std::string& session,
                         const std::string& dir, const std::string& cwd, const std::string& experiment_name);

// Writes the scripts and submits both jobs; throws SlurmError (one line)
// when sbatch is missing or refuses, SpecError for an experiment a job array
// cannot run (a trace to capture: each shard would capture its own).
SlurmSubmission submit_slurm(const ExperimentSpec& spec, const SlurmOptions& opt);

}  // namespace heaplab::experiments
