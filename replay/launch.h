// `heaplab replay`: builds the plan of a trace, starts the replayer process
// for the chosen allocator and load mode, and turns its output into the
// result JSON (trace, allocator, replay, exit status).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "capture/format/trace_reader.h"
#include "replay/settings.h"

namespace heaplab::replay {

struct ReplayOptions {
  std::string trace;
  std::string allocator = "glibc";  // known name or path of a .so
  std::string load = "preload";     // preload | direct
  ReplaySettings settings;          // replay/settings.h
  std::string replayer_dir;         // where the heaplab-replay* executables are ("" = next to heaplab)
  // Environment set for the replayer only (an allocator's settings, e.g.
  // MALLOC_CONF), on top of heaplab's own.
  std::vector<std::pair<std::string, std::string>> env;
  // The replayer is killed, and the replay failed, if it runs longer than
  // this (a hung allocator). 0: default_timeout_s() of the trace.
  double timeout_s = 0;
  // Set: record where every call's block was (heaplab replay --emit-trace,
  // heaplab layout). The plan then gives every object its own table slot
  // (built for this replay, never kept), and after a replay that ran,
  // (*addresses)[i] is the address event i of the trace (in seq order)
  // returned, or freed, or 0. Costs 8 bytes an event here and 8 an object
  // in the replayer.
  std::vector<uint64_t>* addresses = nullptr;
};

// The default limit on one replay's wall time: generous for the trace's
// calls (2 us a call, 100x a slow replay) and the memory they touch (4 s a
// GiB requested), plus twice its recorded duration at `speed` when paced,
// plus two minutes.
double default_timeout_s(uint64_t calls, uint64_t bytes_requested, double paced_duration_s);

// A replay that could not start (bad option, unknown allocator, corrupt
// trace...): what() is one line.
class ReplayError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The allocator, or the replayer of its load mode, is not on this machine
// (not installed, not built): `--allocator all` lists it as skipped.
class NotAvailable : public ReplayError {
 public:
  using ReplayError::ReplayError;
};

// A replay refused for what is the same on every allocator and load mode:
// the options, the trace (unreadable, too many threads, a heap or plan this
// machine cannot hold, ...). `--allocator all` says it once and stops.
class TraceRefused : public ReplayError {
 public:
  using ReplayError::ReplayError;
};

// Throws what run_replay would for the allocator and load mode alone (the
// library, the replayer): NotAvailable, or ReplayError.
void check_launchable(const ReplayOptions& opt);

struct ReplayOutcome {
  nlohmann::json result;
  // 0: replayed exactly as recorded; 1: the replayer failed or crashed, or
  // a call count differs (result["exit"] says which); 2: the replayer
  // refused its input (a library it cannot load directly).
  int exit_code = 0;
  std::string error;  // one line when exit_code != 0
  // ReplayOptions::addresses was filled (the replay ran to its end).
  bool addresses_read = false;
  // The replayer found the kept plan it was given damaged: removed (run
  // again, it is built anew).
  bool damaged_kept_plan = false;
};

// Throws ReplayError when it cannot start (TraceRefused for what any
// allocator would be refused).
ReplayOutcome run_replay(const ReplayOptions& opt);

// The console summary of a result.
std::string result_summary(const nlohmann::json& result);

// `heaplab replay --list-allocators`: each allocator, whether each load mode
// is available, and why not.
std::string list_allocators(const std::string& replayer_dir = "");

// The XXH3-64 of a file's bytes, as 16 hex digits: the trace id. "" if it
// cannot be read, or (given `expect`, the file as a reader opened it) if
// the file by that name is not that one, before or after it was hashed: a
// trace replaced or rewritten meanwhile must not name the plan of another.
std::string file_id(const std::string& path, const trace::TraceReader::FileStamp* expect = nullptr);

}  // namespace heaplab::replay
