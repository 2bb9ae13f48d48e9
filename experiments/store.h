// The results store: one SQLite database (results/heaplab.db by default).
//   sessions  one row per run of an experiment file (its text, hash, when,
//             where, heaplab's version and commit, how many runs it has)
//   runs      one row per replay: the matrix cell, every metric as a
//             column, the environment, the allocator's version and build
//             id, and the replay's whole result JSON
// Written in WAL mode with a busy timeout and one short transaction per
// run, so two experiments can write at once and a killed run loses
// nothing already stored.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/report.h"

struct sqlite3;

namespace heaplab::experiments {

// The time now, UTC, ISO-8601 to the second: how the store writes times.
std::string utc_now_iso();

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The store could not be opened (or made, or read): a bad --results, not a
// failure while running.
class StoreOpenError : public StoreError {
 public:
  using StoreError::StoreError;
};

struct SessionInfo {
  std::string id;
  std::string experiment;
  std::string spec_hash;
  std::string spec;  // the experiment file's text
  std::string baseline;
  std::string started;   // UTC ISO-8601
  std::string finished;  // "" while runs are missing
  int64_t cells = 0;     // runs the session has in all (every shard)
  std::string shard;     // "K/N" or ""
  std::string host, heaplab_version, git_commit;
  std::string owner;   // "host:pid" of the heaplab running it (or that last ran it)
  int64_t stored = 0;  // runs stored (filled by sessions())
};

struct RunRow {
  std::string cell;  // "trace|allocator|r3" (w for warm-up)
  int64_t seq = 0;   // the cell's place in the matrix order
  std::string trace, trace_file, trace_id;
  std::string allocator, allocator_name, load;
  int rep = 0;
  bool warmup = false;
  std::string started;
  std::string exit;  // ok | unfaithful | error | crashed
  bool faithful = false;
  std::map<std::string, double> metrics;
  nlohmann::json result;  // the replay's result JSON
};

class Store {
 public:
  // Opens (creating if needed) the database at `path`; throws StoreError.
  // Read-only: the store must exist and is never written (reports, exports
  // and the dashboard of a results directory one may not write). A store
  // of an older heaplab gets the columns it lacks (new metrics) on open.
  explicit Store(const std::string& path, bool read_only = false);
  ~Store();
  Store(Store&& o) noexcept : read_only_(o.read_only_), db_(o.db_), path_(std::move(o.path_)) { o.db_ = nullptr; }
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Unfinished sessions of `experiment` with this spec hash and shard,
  // newest first (to resume one that no live process owns).
  std::vector<SessionInfo> unfinished(const std::string& experiment, const std::string& spec_hash,
                                      const std::string& shard);
  // Marks `id` as run by `owner` ("host:pid") if its owner is still
  // `seen_owner` (what the caller read, and judged dead): false if another
  // heaplab claimed it in between (two resuming one session at once).
  bool claim_session(const std::string& id, const std::string& seen_owner, const std::string& owner);
  std::optional<SessionInfo> session(const std::string& id);
  // Adds a new session; throws StoreError if the id exists.
  void add_session(const SessionInfo& s);
  void finish_session(const std::string& id);
  // Cells already stored for a session.
  std::set<std::string> done_cells(const std::string& session);
  // The content id of each trace the session's runs replayed (by trace
  // name; one, where runs stored several), without reading their results.
  std::map<std::string, std::string> trace_ids(const std::string& session);
  // Stores one run (replacing a row of the same cell).
  void add_run(const std::string& session, const RunRow& r);
  // Runs started and never stored: a run is noted before it starts (a
  // count a cell, kept durably), its note undone if it ends short of being
  // stored (forget_attempt: the count less one), and the cell's count
  // removed when it is stored (add_run, in the same transaction). What is
  // left was running when its runner died (killed, out of memory, a machine
  // that hung): by cell, how many times.
  void note_attempt(const std::string& session, const std::string& cell);
  void forget_attempt(const std::string& session, const std::string& cell);
  std::map<std::string, int64_t> attempts(const std::string& session);
  // Every session, oldest first, with its count of stored runs.
  std::vector<SessionInfo> sessions();
  // A session's runs as report records, in matrix order.
  std::vector<RunRecord> records(const std::string& session);
  // A session's runs with their result JSON, in matrix order.
  std::vector<RunRow> runs(const std::string& session);

  // Joins stores (e.g. the shards of one session run on several machines)
  // into this one: sessions by id, runs by session and cell (a run already
  // here is kept). A session is finished once all its cells are in.
  // Returns the runs added and the runs that were already there.
  std::pair<int64_t, int64_t> merge_from(const std::string& other_path);

 private:
  void open(const std::string& path, bool read_only);
  void exec(const std::string& sql);
  void migrate();
  bool read_only_ = false;
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace heaplab::experiments
