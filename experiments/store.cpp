#include "experiments/store.h"

#include <sqlite3.h>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <chrono>
#include <ctime>

#include "common/json.h"
#include "experiments/metrics.h"

#include "replay/result.h"

namespace heaplab::experiments {

std::string utc_now_iso() {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return when;
}

namespace {

// A prepared statement, finalised on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql, const std::string& where) : db_(db), where_(where) {
    if (sqlite3_prepare_v2(db, sql.c_str(), int(sql.size()), &s_, nullptr) != SQLITE_OK)
      throw StoreError(where + ": " + sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), int(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind_double(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& bind_null(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }
  // Steps once: true while there is a row.
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw StoreError(where_ + ": " + sqlite3_errmsg(db_));
  }
  std::string text(int i) {
    const auto* p = sqlite3_column_text(s_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), size_t(sqlite3_column_bytes(s_, i))) : std::string();
  }
  int64_t integer(int i) { return sqlite3_column_int64(s_, i); }
  bool is_null(int i) { return sqlite3_column_type(s_, i) == SQLITE_NULL; }
  double real(int i) { return sqlite3_column_double(s_, i); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  std::string where_;
};

const char* kSessionColumns =
    "id, experiment, spec_hash, spec, baseline, started, finished, cells, shard, host, heaplab_version, git_commit, "
    "owner";

SessionInfo read_session(Stmt& q) {
  SessionInfo s;
  s.id = q.text(0);
  s.experiment = q.text(1);
  s.spec_hash = q.text(2);
  s.spec = q.text(3);
  s.baseline = q.text(4);
  s.started = q.text(5);
  s.finished = q.text(6);
  s.cells = q.integer(7);
  s.shard = q.text(8);
  s.host = q.text(9);
  s.heaplab_version = q.text(10);
  s.git_commit = q.text(11);
  s.owner = q.text(12);
  return s;
}

std::string metric_columns() {
  std::string s;
  for (const Metric& m : all_metrics()) s += ", " + m.name;
  return s;
}

}  // namespace

namespace {

// A file name as an SQLite URI path ('%', '?' and '#' escaped).
std::string uri_path(const std::string& path) {
  std::string u = "file:";
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#')
      u += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else
      u += c;
  }
  return u;
}

// "" if `db` is a heaplab store; else why not: "not a heaplab results
// store", or the SQLite error that kept it from being read (its code in
// `code`).
std::string not_a_store(sqlite3* db, int& code) {
  code = SQLITE_OK;
  sqlite3_stmt* s = nullptr;
  const char* sql = "SELECT value FROM store_info WHERE key = 'format'";
  std::string why;
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) {
    why = sqlite3_errmsg(db);
    code = sqlite3_errcode(db) & 0xff;
    // (A file that is no SQLite database, or one without heaplab's table.)
    if (why.starts_with("no such table") || sqlite3_errcode(db) == SQLITE_NOTADB)
      why = "not a heaplab results store";
    else
      why = "cannot read the results store: " + why;
  } else if (const int rc = sqlite3_step(s); rc == SQLITE_ROW) {
    const auto* v = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    if (!v || std::string(v) != "heaplab-results") why = "not a heaplab results store";
  } else if (rc == SQLITE_DONE || rc == SQLITE_NOTADB) {
    why = "not a heaplab results store";
  } else {
    why = std::string("cannot read the results store: ") + sqlite3_errmsg(db);
    code = rc & 0xff;
  }
  sqlite3_finalize(s);
  return why;
}

}  // namespace

Store::Store(const std::string& path, bool read_only) : read_only_(read_only), path_(path) {
  try {
    open(path, read_only);
  } catch (const StoreOpenError&) {
    throw;
  } catch (const StoreError& e) {
    throw StoreOpenError(e.what());
  }
}

void Store::open(const std::string& path, bool read_only) {
  const int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError(path + ": cannot open the results store: " + why);
  }
  sqlite3_busy_timeout(db_, 30000);
  if (read_only) {
    // It must be a heaplab store (SQLite opens any file lazily).
    int code = SQLITE_OK;
    std::string why = not_a_store(db_, code);
    std::error_code ec;
    const bool wal = std::filesystem::file_size(path + "-wal", ec) > 0 && !ec;
    if (wal && (code == SQLITE_CANTOPEN || code == SQLITE_READONLY || code == SQLITE_PERM))
      why = "cannot read the results store here: its write-ahead log (" + path +
            "-wal) holds changes that only a writable directory lets SQLite read (another heaplab writing it, or "
            "one that was killed): copy the store and its -wal file to a directory you can write";
    else if (code == SQLITE_CANTOPEN || code == SQLITE_READONLY || code == SQLITE_PERM) {
      // A store this user cannot write beside (a read-only directory or
      // file system, another user's results): reading the write-ahead log
      // needs its shared-memory file there. With no log to read (every
      // change checkpointed into the file), the file is the store: it is
      // read as an immutable file, without one.
      sqlite3_close(db_);
      db_ = nullptr;
      if (sqlite3_open_v2(uri_path(path).append("?immutable=1").c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                          nullptr) == SQLITE_OK)
        why = not_a_store(db_, code);
    }
    if (!why.empty()) {
      sqlite3_close(db_);
      db_ = nullptr;
      throw StoreError(path + ": " + why);
    }
    return;
  }
  try {
    // Switching to WAL takes an exclusive lock for which SQLite may not wait
    // (two heaplabs creating one store at once got "database is locked"):
    // retried here for as long as the busy timeout.
    for (int waited_ms = 0;; waited_ms += 10) {
      try {
        exec("PRAGMA journal_mode=WAL");
        break;
      } catch (const StoreError&) {
        if (sqlite3_errcode(db_) != SQLITE_BUSY || waited_ms >= 30000) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    // FULL: a run's attempt is noted durably before it starts (a machine
    // that hangs loses no commit); one fsync a run costs nothing here.
    exec("PRAGMA synchronous=FULL");
    // The schema in one write transaction, its lock taken up front (a read
    // upgraded to a write is refused without waiting when another process
    // does the same).
    exec("BEGIN IMMEDIATE");
    std::string metric_cols;
    for (const Metric& m : all_metrics()) metric_cols += ", " + m.name + " REAL";
    exec(
        "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, experiment TEXT NOT NULL, spec_hash TEXT, "
        "spec TEXT, baseline TEXT, started TEXT, finished TEXT, cells INTEGER, shard TEXT, host TEXT, "
        "heaplab_version TEXT, git_commit TEXT, owner TEXT)");
    exec(
        "CREATE TABLE IF NOT EXISTS runs (session TEXT NOT NULL, cell TEXT NOT NULL, seq INTEGER, trace TEXT, "
        "trace_file TEXT, trace_id TEXT, allocator TEXT, allocator_name TEXT, load TEXT, rep INTEGER, warmup INTEGER, "
        "started TEXT, exit TEXT, faithful INTEGER, host TEXT, cpu TEXT, kernel TEXT, allocator_version TEXT, "
        "allocator_build_id TEXT" +
        metric_cols + ", result TEXT, PRIMARY KEY (session, cell))");
    exec("CREATE TABLE IF NOT EXISTS store_info (key TEXT PRIMARY KEY, value TEXT)");
    exec(
        "CREATE TABLE IF NOT EXISTS attempts (session TEXT NOT NULL, cell TEXT NOT NULL, count INTEGER NOT NULL, "
        "PRIMARY KEY (session, cell))");
    exec("INSERT OR IGNORE INTO store_info VALUES ('format', 'heaplab-results'), ('format_version', '1')");
    {
      Stmt f(db_, "SELECT value FROM store_info WHERE key = 'format'", path);
      if (!f.step() || f.text(0) != "heaplab-results") throw StoreError(path + ": not a heaplab results store");
    }
    migrate();
    exec("COMMIT");
  } catch (const StoreError& e) {
    // A store this user may read but not write: say so, and what to do.
    const int code = sqlite3_errcode(db_) & 0xff;
    sqlite3_close(db_);
    db_ = nullptr;
    if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN || code == SQLITE_PERM)
      throw StoreError(path + ": the results store cannot be written here (" +
                       std::string(e.what()).substr(path.size() + 2) +
                       "): give --results a directory you can write, or copy the store there");
    throw;
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Store::~Store() { sqlite3_close(db_); }

// Columns a newer heaplab has and an older store lacks (a new metric, the
// session owner) are added; none is ever removed or renamed.
void Store::migrate() {
  const auto columns = [&](const char* table) {
    std::vector<std::string> v;
    Stmt q(db_, std::string("PRAGMA table_info(") + table + ")", path_);
    while (q.step()) v.push_back(q.text(1));
    return v;
  };
  const std::vector<std::string> s = columns("sessions");
  if (std::find(s.begin(), s.end(), "owner") == s.end()) exec("ALTER TABLE sessions ADD COLUMN owner TEXT");
  const std::vector<std::string> r = columns("runs");
  for (const Metric& m : all_metrics())
    if (std::find(r.begin(), r.end(), m.name) == r.end()) exec("ALTER TABLE runs ADD COLUMN " + m.name + " REAL");
}

void Store::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw StoreError(path_ + ": " + why);
  }
}

std::vector<SessionInfo> Store::unfinished(const std::string& experiment, const std::string& spec_hash,
                                           const std::string& shard) {
  std::vector<SessionInfo> v;
  Stmt q(db_,
         std::string("SELECT ") + kSessionColumns +
             " FROM sessions WHERE experiment = ? AND spec_hash = ? AND shard = ? AND finished = '' "
             "ORDER BY started DESC, id DESC",
         path_);
  q.bind(1, experiment).bind(2, spec_hash).bind(3, shard);
  while (q.step()) v.push_back(read_session(q));
  return v;
}

bool Store::claim_session(const std::string& id, const std::string& seen_owner, const std::string& owner) {
  Stmt q(db_, "UPDATE sessions SET owner = ? WHERE id = ? AND COALESCE(owner, '') = ?", path_);
  q.bind(1, owner).bind(2, id).bind(3, seen_owner);
  q.step();
  return sqlite3_changes(db_) == 1;
}

std::optional<SessionInfo> Store::session(const std::string& id) {
  Stmt q(db_, std::string("SELECT ") + kSessionColumns + " FROM sessions WHERE id = ?", path_);
  q.bind(1, id);
  if (!q.step()) return std::nullopt;
  SessionInfo s = read_session(q);
  Stmt c(db_, "SELECT count(*) FROM runs WHERE session = ?", path_);
  c.bind(1, id);
  if (c.step()) s.stored = c.integer(0);
  return s;
}

void Store::add_session(const SessionInfo& s) {
  Stmt q(db_,
         std::string("INSERT INTO sessions (") + kSessionColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
         path_ + ": session '" + s.id + "'");
  q.bind(1, s.id).bind(2, s.experiment).bind(3, s.spec_hash).bind(4, s.spec).bind(5, s.baseline);
  q.bind(6, s.started).bind(7, s.finished).bind(8, s.cells).bind(9, s.shard).bind(10, s.host);
  q.bind(11, s.heaplab_version).bind(12, s.git_commit).bind(13, s.owner);
  q.step();
}

void Store::finish_session(const std::string& id) {
  Stmt q(db_, "UPDATE sessions SET finished = strftime('%Y-%m-%dT%H:%M:%SZ', 'now') WHERE id = ?", path_);
  q.bind(1, id);
  q.step();
}

std::map<std::string, std::string> Store::trace_ids(const std::string& session) {
  std::map<std::string, std::string> m;
  Stmt q(db_, "SELECT trace, MIN(trace_id) FROM runs WHERE session = ? AND trace_id <> '' GROUP BY trace", path_);
  q.bind(1, session);
  while (q.step()) m[q.text(0)] = q.text(1);
  return m;
}

std::set<std::string> Store::done_cells(const std::string& session) {
  std::set<std::string> s;
  Stmt q(db_, "SELECT cell FROM runs WHERE session = ?", path_);
  q.bind(1, session);
  while (q.step()) s.insert(q.text(0));
  return s;
}

void Store::note_attempt(const std::string& session, const std::string& cell) {
  Stmt q(db_, "INSERT INTO attempts VALUES (?, ?, 1) ON CONFLICT (session, cell) DO UPDATE SET count = count + 1",
         path_);
  q.bind(1, session).bind(2, cell).step();
}

void Store::forget_attempt(const std::string& session, const std::string& cell) {
  Stmt q(db_, "UPDATE attempts SET count = count - 1 WHERE session = ? AND cell = ?", path_);
  q.bind(1, session).bind(2, cell).step();
  Stmt d(db_, "DELETE FROM attempts WHERE session = ? AND cell = ? AND count <= 0", path_);
  d.bind(1, session).bind(2, cell).step();
}

std::map<std::string, int64_t> Store::attempts(const std::string& session) {
  std::map<std::string, int64_t> m;
  Stmt q(db_, "SELECT cell, count FROM attempts WHERE session = ?", path_);
  q.bind(1, session);
  while (q.step()) m[q.text(0)] = q.integer(1);
  return m;
}

void Store::add_run(const std::string& session, const RunRow& r) {
  std::string marks;
  for (size_t i = 0; i < all_metrics().size(); ++i) marks += ", ?";
  Stmt q(db_,
         "INSERT OR REPLACE INTO runs (session, cell, seq, trace, trace_file, trace_id, allocator, "
         "allocator_name, load, rep, warmup, started, exit, faithful, host, cpu, kernel, allocator_version, "
         "allocator_build_id" +
             metric_columns() +
             ", result) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
             "?, ?, ?, ?, ?" +
             marks + ", ?)",
         path_);
  const replay::ReplayResult rr = replay::try_result_from_json(r.result).value_or(replay::ReplayResult{});
  int i = 0;
  for (const std::string& v : {session, r.cell}) q.bind(++i, v);
  q.bind(++i, r.seq);
  for (const std::string& v : {r.trace, r.trace_file, r.trace_id, r.allocator, r.allocator_name, r.load})
    q.bind(++i, v);
  for (const int64_t v : {int64_t(r.rep), int64_t(r.warmup)}) q.bind(++i, v);
  for (const std::string& v : {r.started, r.exit}) q.bind(++i, v);
  q.bind(++i, int64_t(r.faithful));
  for (const std::string& v : {rr.host, rr.cpu_model, rr.kernel, rr.version, rr.build_id}) q.bind(++i, v);
  for (const Metric& m : all_metrics()) {
    ++i;
    if (auto it = r.metrics.find(m.name); it != r.metrics.end())
      q.bind_double(i, it->second);
    else
      q.bind_null(i);
  }
  q.bind(++i, r.result.dump());
  // The run and the end of its attempt in one transaction: a crash between
  // the two cannot leave an attempt of a stored run.
  exec("BEGIN IMMEDIATE");
  try {
    q.step();
    Stmt d(db_, "DELETE FROM attempts WHERE session = ? AND cell = ?", path_);
    d.bind(1, session).bind(2, r.cell).step();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<SessionInfo> Store::sessions() {
  std::vector<SessionInfo> v;
  Stmt q(db_, std::string("SELECT ") + kSessionColumns + " FROM sessions ORDER BY started, id", path_);
  while (q.step()) v.push_back(read_session(q));
  for (SessionInfo& s : v) {
    Stmt c(db_, "SELECT count(*) FROM runs WHERE session = ?", path_);
    c.bind(1, s.id);
    if (c.step()) s.stored = c.integer(0);
  }
  return v;
}

std::vector<RunRecord> Store::records(const std::string& session) {
  std::vector<RunRecord> v;
  Stmt q(db_,
         "SELECT trace, allocator, rep, warmup, exit, faithful" + metric_columns() +
             " FROM runs WHERE session = ? ORDER BY seq",
         path_);
  q.bind(1, session);
  while (q.step()) {
    RunRecord r;
    r.trace = q.text(0);
    r.allocator = q.text(1);
    r.rep = int(q.integer(2));
    r.warmup = q.integer(3) != 0;
    r.ok = q.text(4) == "ok" && q.integer(5) != 0;
    int col = 6;
    for (const Metric& m : all_metrics()) {
      if (!q.is_null(col)) r.metrics[m.name] = q.real(col);
      ++col;
    }
    v.push_back(std::move(r));
  }
  return v;
}

std::vector<RunRow> Store::runs(const std::string& session) {
  std::vector<RunRow> v;
  Stmt q(db_,
         "SELECT cell, seq, trace, trace_file, trace_id, allocator, allocator_name, load, rep, warmup, started, "
         "exit, faithful, result FROM runs WHERE session = ? ORDER BY seq",
         path_);
  q.bind(1, session);
  while (q.step()) {
    RunRow r;
    r.cell = q.text(0);
    r.seq = q.integer(1);
    r.trace = q.text(2);
    r.trace_file = q.text(3);
    r.trace_id = q.text(4);
    r.allocator = q.text(5);
    r.allocator_name = q.text(6);
    r.load = q.text(7);
    r.rep = int(q.integer(8));
    r.warmup = q.integer(9) != 0;
    r.started = q.text(10);
    r.exit = q.text(11);
    r.faithful = q.integer(12) != 0;
    // Bounded (common/json.h): a store merged from a shard or a CI artifact
    // is outside input; a result past the bounds reads as unreadable.
    r.result = common::parse_bounded_json(q.text(13));
    r.metrics = extract_metrics(r.result);
    v.push_back(std::move(r));
  }
  return v;
}

std::pair<int64_t, int64_t> Store::merge_from(const std::string& other) {
  {
    Store probe(other, true);  // must be a heaplab store: a clear error naming it if not
  }
  // A store in a directory this user cannot write cannot be attached (SQLite
  // needs its shared-memory file beside it): a copy of it is, made beside
  // this store (the probe above refused one whose log still holds changes).
  std::string source = other;
  struct Copy {
    std::string path;
    ~Copy() {  // (detached by now: its log and shared memory go too)
      if (path.empty()) return;
      for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
    }
  } copy;
  if (const std::filesystem::path dir = std::filesystem::path(other).parent_path();
      access(dir.empty() ? "." : dir.c_str(), W_OK) != 0) {
    copy.path = path_ + ".merge-" + std::to_string(getpid()) + ".tmp";
    std::error_code ec;
    std::filesystem::copy_file(other, copy.path, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      copy.path.clear();
      throw StoreError(other + ": cannot merge: copying it beside " + path_ + ": " + ec.message());
    }
    source = copy.path;
  }
  Stmt attach(db_, "ATTACH DATABASE ? AS other", other);
  attach.bind(1, source);
  attach.step();
  const auto count = [&](const char* sql) {
    Stmt q(db_, sql, other);
    return q.step() ? q.integer(0) : 0;
  };
  std::pair<int64_t, int64_t> added_kept{0, 0};
  try {
    exec("BEGIN IMMEDIATE");
    // Columns by name: the other store may be of an older heaplab (fewer
    // metric columns; missing ones stay NULL).
    const auto cols = [&](const char* table) {
      std::vector<std::string> v;
      Stmt q(db_, std::string("PRAGMA other.table_info(") + table + ")", other);
      while (q.step()) v.push_back(q.text(1));
      return v;
    };
    for (const char* table : {"sessions", "runs"}) {
      std::string list;
      for (const std::string& c : cols(table)) list += (list.empty() ? "" : ", ") + c;
      if (std::string(table) == "runs") {
        const int64_t before = count("SELECT count(*) FROM runs");
        const int64_t theirs = count("SELECT count(*) FROM other.runs");
        exec("INSERT OR IGNORE INTO runs (" + list + ") SELECT " + list + " FROM other.runs");
        added_kept.first = count("SELECT count(*) FROM runs") - before;
        added_kept.second = theirs - added_kept.first;
      } else {
        exec("INSERT OR IGNORE INTO sessions (" + list + ") SELECT " + list + " FROM other.sessions");
      }
    }
    // A session is finished when every cell is in (shards merged).
    exec(
        "UPDATE sessions SET finished = COALESCE(NULLIF(finished, ''), strftime('%Y-%m-%dT%H:%M:%SZ', 'now')) "
        "WHERE cells <= (SELECT count(*) FROM runs WHERE runs.session = sessions.id)");
    exec("COMMIT");
  } catch (const StoreError& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_exec(db_, "DETACH DATABASE other", nullptr, nullptr, nullptr);
    throw StoreError(other + ": cannot merge: " + e.what());
  }
  exec("DETACH DATABASE other");
  return added_kept;
}

}  // namespace heaplab::experiments
