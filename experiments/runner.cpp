#include "experiments/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <tuple>

#include "allocators/library.h"
#include "capture/import/metadata.h"
#include "capture/launch/launcher.h"
#include "common/files.h"
#include "common/process.h"
#include "experiments/metrics.h"
#include "experiments/report.h"
#include "experiments/store.h"
#include "replay/launch.h"
#include "replay/result.h"

#if __has_include("generated/git_commit.h")
#include "generated/git_commit.h"
#endif
#ifndef HEAPLAB_GIT_COMMIT
#define HEAPLAB_GIT_COMMIT ""
#endif

extern char** environ;

namespace heaplab::experiments {

namespace fs = std::filesystem;

std::string heaplab_git_commit() { return HEAPLAB_GIT_COMMIT; }

std::vector<Cell> matrix(const ExperimentSpec& spec) {
  std::vector<Cell> cells;
  const size_t n = spec.allocators.size();
  const uint32_t rounds = spec.warmup + spec.repetitions;
  for (uint32_t round = 0; round < rounds; ++round) {
    const bool warm = round < spec.warmup;
    const uint32_t rep = warm ? round : round - spec.warmup;
    for (size_t t = 0; t < spec.traces.size(); ++t) {
      for (size_t k = 0; k < n; ++k) {
        Cell c;
        c.trace = t;
        c.allocator = (k + round) % n;  // a different allocator first each round
        c.rep = rep;
        c.warmup = warm;
        c.seq = int64_t(cells.size());
        c.key = spec.traces[t].name + "|" + spec.allocators[c.allocator].label + "|" + (warm ? "w" : "r") +
                std::to_string(rep);
        cells.push_back(c);
      }
    }
  }
  return cells;
}

std::pair<uint32_t, uint32_t> parse_shard(const std::string& s) {
  unsigned k = 0, n = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%u/%u%c", &k, &n, &tail) != 2 || n == 0 || k == 0 || k > n || n > 100000)
    throw RunError("--shard: expected K/N with 1 <= K <= N (e.g. 2/8), not '" + s + "'");
  return {k, n};
}

namespace {

volatile sig_atomic_t g_interrupted = 0;
void on_interrupt(int) { g_interrupted = 1; }

std::string host_name() {
  struct utsname u {};
  return uname(&u) == 0 ? u.nodename : "";
}

std::string short_hash(const std::string& text) {
  // FNV-1a 64 of the experiment's text: the spec hash (sessions of the same
  // text resume each other).
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

std::string last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last;
}

// Captures a trace's program with `heaplab capture` (this executable), its
// output into PATH.log.
void capture(const TraceSpec& t, const std::string& out, bool quiet) {
  const std::string heaplab = common::self_dir() + "/heaplab";
  const std::string log = out + ".log";
  std::vector<std::string> args = {heaplab, "capture", "-q", "--allocator", t.capture_allocator, "-o", out, "--"};
  args.insert(args.end(), t.capture.begin(), t.capture.end());
  process::Spec spec;
  spec.argv = std::move(args);
  spec.in = process::Stdio::null;
  spec.out = process::Stdio::file;
  spec.out_file = log;
  spec.err = process::Stdio::to_out;
  if (!quiet) {
    std::string cmd;
    for (const auto& a : t.capture) cmd += (cmd.empty() ? "" : " ") + a;
    fmt::print(stderr, "heaplab: capturing trace '{}': {} -> {}\n", t.name, cmd, out);
  }
  int st = 0;
  try {
    st = process::spawn(spec).wait();
  } catch (const process::SpawnError& e) {
    throw RunError("trace '" + t.name + "': cannot start " + heaplab + ": " +
                   (e.exec_failed() ? std::string(std::strerror(e.err())) : std::string(e.what())));
  }
  const int code = process::exit_code(st);
  if (!fs::exists(out) || code == 2)
    throw RunError("trace '" + t.name + "': capturing '" + t.capture[0] + "' failed (exit " + std::to_string(code) +
                   "): " + last_line(log) + " (log: " + log + ")");
  if (code != 0 && !quiet)
    fmt::print(stderr, "heaplab: note: '{}' exited with {} while captured; its trace is used (log: {})\n", t.capture[0],
               code, log);
}

std::string duration(double s) {
  const long v = std::lround(s);
  return v >= 3600 ? fmt::format("{}:{:02}:{:02}", v / 3600, v / 60 % 60, v % 60)
                   : fmt::format("{}:{:02}", v / 60, v % 60);
}

}  // namespace

RunnerResult run_experiment(const ExperimentSpec& spec, const RunnerOptions& opt) {
  uint32_t shard_k = 1, shard_n = 1;
  if (!opt.shard.empty()) {
    std::tie(shard_k, shard_n) = parse_shard(opt.shard);
    if (opt.session.empty())
      throw RunError(
          "--shard needs --session ID: one id for every shard of this run (e.g. the job array's), "
          "so that heaplab results merge joins them and another run of the file gets its own");
  }

  // Everything that can be checked before anything runs.
  for (const TraceSpec& t : spec.traces) {
    std::string err;
    if (!t.capture.empty() && !allocators::resolve_allocator(t.capture_allocator, err))
      throw SpecError(spec.path + ": trace '" + t.name + "': capture_allocator: " + err);
  }
  for (const AllocatorSpec& a : spec.allocators) {
    std::string err;
    if (!allocators::resolve_allocator(a.name, err))
      throw SpecError(spec.path + ": allocator '" + a.label + "': " + err);
    if (a.load == "direct") {
      bool known = false;
      for (const auto& k : allocators::known_allocators()) {
        if (k.name != a.name) continue;
        known = true;
        const std::string dir = opt.replayer_dir.empty() ? common::self_dir() : opt.replayer_dir;
        if (access((dir + "/" + k.replayer).c_str(), X_OK) != 0)
          throw SpecError(spec.path + ": allocator '" + a.label + "': " + k.replayer + " not built (install " +
                          k.dev_package + " and rebuild)");
      }
      if (!known && a.name.find('/') == std::string::npos)
        throw SpecError(spec.path + ": allocator '" + a.label + "': no direct load mode for '" + a.name + "'");
    }
  }
  for (const TraceSpec& t : spec.traces) {
    // Shards run apart (other machines): each would capture its own trace.
    if (!opt.shard.empty() && !t.capture.empty())
      throw SpecError(spec.path + ": trace '" + t.name +
                      "': --shard needs trace files (each shard would capture "
                      "its own run of the program); capture it once with heaplab capture and give 'file'");
  }
  // A trace file is a trace, with the times the replays need: found now,
  // not after the matrix's first runs (a session then stuck at its error).
  for (const TraceSpec& t : spec.traces) {
    if (t.file.empty()) continue;
    if (access(t.file.c_str(), R_OK) != 0)
      throw SpecError(spec.path + ": trace '" + t.name + "': " + t.file + ": " + std::strerror(errno));
    std::unique_ptr<trace::TraceReader> r;
    try {
      r = trace::TraceReader::open(t.file);
    } catch (const trace::TraceError& e) {
      throw SpecError(spec.path + ": trace '" + t.name + "': " + e.what());
    }
    if (spec.replay.timing == replay::Timing::recorded && !r->has_time())
      throw SpecError(spec.path + ": trace '" + t.name + "': " + t.file +
                      " has no timestamps (imported from a log without times?), and the experiment replays at the "
                      "recorded pace, its default: give it 'replay: {timing: fast}'");
  }

  std::error_code ec;
  fs::create_directories(opt.results_dir, ec);
  if (ec) throw RunError(opt.results_dir + ": cannot create the results directory: " + ec.message());
  RunnerResult res;
  res.store = (fs::path(opt.results_dir) / "heaplab.db").string();
  Store store(res.store);

  const std::string hash = short_hash(spec.text);
  const std::string shard = opt.shard.empty() ? "" : fmt::format("{}/{}", shard_k, shard_n);
  const std::vector<Cell> cells = matrix(spec);
  const std::string me = host_name() + ":" + std::to_string(getpid());
  // Whether another heaplab on this host is running a session now.
  const auto alive_elsewhere = [&](const SessionInfo& x) {
    const size_t colon = x.owner.rfind(':');
    if (colon == std::string::npos || x.owner.substr(0, colon) != host_name()) return false;
    const long pid = std::strtol(x.owner.c_str() + colon + 1, nullptr, 10);
    return pid > 0 && pid != getpid() && (kill(pid_t(pid), 0) == 0 || errno == EPERM);
  };
  std::optional<SessionInfo> s;
  if (!opt.session.empty()) {
    s = store.session(opt.session);
    if (s && (s->experiment != spec.name || s->spec_hash != hash))
      throw RunError("session '" + opt.session + "' in " + res.store + " is of experiment '" + s->experiment +
                     "' with another experiment file; give another --session");
    if (s && opt.fresh) throw RunError("--new: session '" + opt.session + "' exists in " + res.store);
    if (s && s->shard != shard)
      throw RunError("session '" + opt.session + "' was run " +
                     (s->shard.empty() ? std::string("whole") : "as shard " + s->shard) + ", not " +
                     (shard.empty() ? std::string("whole") : "as shard " + shard));
    if (s && alive_elsewhere(*s))
      throw RunError("session '" + opt.session + "' is being run by heaplab " + s->owner + " now");
  } else if (!opt.fresh) {
    for (const SessionInfo& u : store.unfinished(spec.name, hash, shard))
      if (!alive_elsewhere(u)) {
        s = u;
        break;
      }
  }
  if (!s) {
    SessionInfo n;
    n.experiment = spec.name;
    n.spec_hash = hash;
    n.spec = spec.text;
    n.baseline = spec.baseline;
    n.started = utc_now_iso();
    n.cells = int64_t(cells.size());
    n.shard = shard;
    n.host = host_name();
    n.heaplab_version = import::tool_version();
    n.git_commit = heaplab_git_commit();
    n.owner = me;
    // A new id: the one given, else name-time-hash with a suffix if that
    // is taken (sessions started in the same second, here or by another
    // heaplab writing the same store).
    const std::string base =
        !opt.session.empty() ? opt.session : spec.name + "-" + utc_now_iso() + "-" + hash.substr(0, 8);
    for (int k = 1;; ++k) {
      n.id = k == 1 ? base : base + "-" + std::to_string(k);
      if (store.session(n.id)) continue;
      try {
        store.add_session(n);
        break;
      } catch (const StoreError&) {
        if (!opt.session.empty() || k > 100) throw;
      }
    }
    s = store.session(n.id);
    if (!s) throw RunError(res.store + ": the new session was not stored");
  }
  // Taken atomically: of two heaplabs resuming one session at once, one
  // runs it (the other would take its live runs for dead ones).
  if (!store.claim_session(s->id, s->owner, me)) {
    const std::optional<SessionInfo> now = store.session(s->id);
    throw RunError("session '" + s->id + "' was just taken up by heaplab " + (now ? now->owner : std::string("?")) +
                   "; run the command again once it is done, or with --new for a session of its own");
  }
  res.session = s->id;
  res.cells = int64_t(cells.size());
  const std::set<std::string> done = store.done_cells(s->id);

  // Traces: files as given; programs captured once per session.
  std::vector<std::string> trace_paths;
  const fs::path trace_dir = fs::path(opt.results_dir) / "traces" / s->id;
  for (const TraceSpec& t : spec.traces) {
    if (!t.file.empty()) {
      trace_paths.push_back(t.file);
      continue;
    }
    fs::create_directories(trace_dir, ec);
    const std::string out = (trace_dir / (t.name + ".hlt")).string();
    if (!fs::exists(out)) capture(t, out, opt.quiet);
    trace_paths.push_back(out);
  }

  // Each trace's content, as this session's runs replayed it: a resume on
  // a trace file changed since (or one changed while the session runs)
  // would mix two traces' runs in one session, which reports and gates
  // would take for one.
  std::vector<std::string> trace_ids(spec.traces.size());
  const auto changed = [&](size_t k, const std::string& was, const std::string& now) {
    return RunError(fmt::format(
        "trace '{}': {} is not the trace this session's runs replayed (its content id is {}, theirs {}): runs of the "
        "two would be mixed in one session; run with --new for a session of its own, or put the trace back",
        spec.traces[k].name, trace_paths[k], now, was));
  };
  if (!done.empty()) {
    const std::map<std::string, std::string> stored = store.trace_ids(s->id);
    for (size_t k = 0; k < spec.traces.size(); ++k)
      if (const auto it = stored.find(spec.traces[k].name); it != stored.end()) trace_ids[k] = it->second;
    for (size_t k = 0; k < spec.traces.size(); ++k)
      if (!trace_ids[k].empty())
        if (const std::string now = replay::file_id(trace_paths[k]); !now.empty() && now != trace_ids[k])
          throw changed(k, trace_ids[k], now);
  }

  std::vector<const Cell*> todo;
  for (const Cell& c : cells) {
    if (c.seq % shard_n != shard_k - 1) continue;
    if (done.count(c.key)) {
      ++res.already;
      continue;
    }
    todo.push_back(&c);
  }
  // A cell's row as far as the matrix says (the run fills in the rest).
  const auto row_of = [&](const Cell& c) {
    RunRow row;
    row.started = utc_now_iso();
    row.cell = c.key;
    row.seq = c.seq;
    row.trace = spec.traces[c.trace].name;
    row.trace_file = trace_paths[c.trace];
    row.allocator = spec.allocators[c.allocator].label;
    row.allocator_name = spec.allocators[c.allocator].name;
    row.load = spec.allocators[c.allocator].load;
    row.rep = int(c.rep);
    row.warmup = c.warmup;
    return row;
  };
  // Runs that were going when an earlier runner died (killed, out of
  // memory, a machine that hung): tried again last, so that one such run
  // does not stop the rest; one that took its runner down twice is stored
  // as failed ("runner_died") and not tried again.
  const std::map<std::string, int64_t> tried = store.attempts(s->id);
  const auto died_in = [&](const Cell* c) {
    const auto it = tried.find(c->key);
    return it == tried.end() ? int64_t{0} : it->second;
  };
  for (auto it = todo.begin(); it != todo.end();) {
    const Cell& c = **it;
    if (died_in(&c) < 2) {
      ++it;
      continue;
    }
    RunRow row = row_of(c);
    row.exit = "runner_died";
    row.faithful = false;
    const std::string why = fmt::format(
        "heaplab died {} times while this run was going (killed, out of memory, or the machine hung): not tried again",
        died_in(&c));
    row.result = {{"exit", {{"status", "runner_died"}}}, {"error", why}};
    store.add_run(s->id, row);  // (and its attempts go)
    if (!opt.quiet) fmt::print(stderr, "heaplab: {} on {}, rep {}: {}\n", row.trace, row.allocator, c.rep + 1, why);
    it = todo.erase(it);
  }
  const auto again = std::stable_partition(todo.begin(), todo.end(), [&](const Cell* c) { return died_in(c) == 0; });
  if (again != todo.end() && !opt.quiet)
    fmt::print(stderr, "heaplab: {} run(s) were going when an earlier heaplab died: they run last\n",
               todo.end() - again);
  const bool tty = isatty(2) && !opt.quiet;
  if (!opt.quiet) {
    fmt::print(stderr, "heaplab: experiment '{}', session {}: {} runs{}{}\n", spec.name, s->id, todo.size(),
               shard.empty() ? "" : " (shard " + shard + " of " + std::to_string(cells.size()) + ")",
               res.already ? fmt::format(" to go, {} already stored", res.already) : "");
  }

  // Ctrl-C and SIGTERM end the experiment after the current run, for as
  // long as the loop runs (restored however it ends).
  struct Handlers {
    struct sigaction old_int {
    }, old_term{};
    Handlers() {
      struct sigaction sa {};
      sa.sa_handler = on_interrupt;
      sigemptyset(&sa.sa_mask);
      g_interrupted = 0;
      sigaction(SIGINT, &sa, &old_int);
      sigaction(SIGTERM, &sa, &old_term);
    }
    ~Handlers() {
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
    }
  } handlers;
  const auto t0 = std::chrono::steady_clock::now();
  // What the replays warn of (the trace's times, its coverage, threads on
  // too few CPUs, another allocator answering), each once per trace: stored
  // with every run's result, and said here, where the user is looking.
  std::set<std::pair<std::string, std::string>> warned;
  for (size_t i = 0; i < todo.size(); ++i) {
    if (g_interrupted) break;
    const Cell& c = *todo[i];
    const TraceSpec& t = spec.traces[c.trace];
    const AllocatorSpec& a = spec.allocators[c.allocator];
    const std::string what = fmt::format("{} on {}, {} {}", t.name, a.label, c.warmup ? "warm-up" : "rep", c.rep + 1);
    if (tty) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string eta = i ? " ETA " + duration(elapsed / double(i) * double(todo.size() - i)) : "";
      const size_t width = 24, filled = width * i / todo.size();
      fmt::print(stderr, "\r\033[K[{}{}] {}/{} {}{}", std::string(filled, '#'), std::string(width - filled, '.'), i,
                 todo.size(), what, eta);
    }
    replay::ReplayOptions ro;
    ro.trace = trace_paths[c.trace];
    ro.allocator = a.name;
    ro.load = a.load;
    ro.env = a.env;
    ro.settings = spec.replay;
    ro.replayer_dir = opt.replayer_dir;
    ro.timeout_s = spec.timeout_s;
    RunRow row = row_of(c);
    replay::ReplayOutcome o;
    store.note_attempt(s->id, c.key);
    // However this run ends short of being stored (interrupted, an error,
    // an exception), it did not take the runner down: its note is undone.
    // Only a runner that dies leaves it.
    struct Attempt {
      Store& store;
      const std::string& session;
      const std::string& cell;
      bool stored = false;
      ~Attempt() {
        if (stored) return;
        try {
          store.forget_attempt(session, cell);
        } catch (const StoreError&) {  // (the error that got us here is the one to report)
        }
      }
    } attempt{store, s->id, c.key};
    try {
      o = replay::run_replay(ro);
    } catch (const replay::ReplayError& e) {
      if (g_interrupted) break;  // Ctrl-C reached a check's child process: not the trace's fault
      if (tty) fmt::print(stderr, "\r\033[K");
      throw RunError("trace '" + t.name + "' on '" + a.label + "': " + e.what());
    }
    // A run cut short by the interrupt is not a result: it runs again on resume.
    if (g_interrupted) break;
    if (!opt.quiet && o.result.contains("warnings") && o.result["warnings"].is_array())
      for (const auto& w : o.result["warnings"])
        if (w.is_string() && warned.emplace(t.name, w.get<std::string>()).second) {
          if (tty) fmt::print(stderr, "\r\033[K");
          fmt::print(stderr, "heaplab: warning: trace '{}': {}\n", t.name, w.get<std::string>());
        }
    const replay::ReplayResult rr = replay::result_from_json(o.result);
    if (!rr.trace_id.empty()) {
      if (trace_ids[c.trace].empty())
        trace_ids[c.trace] = rr.trace_id;
      else if (rr.trace_id != trace_ids[c.trace]) {
        if (tty) fmt::print(stderr, "\r\033[K");
        throw changed(c.trace, trace_ids[c.trace], rr.trace_id);
      }
    }
    row.trace_id = rr.trace_id;
    row.exit = rr.exit_status.empty() ? "error" : rr.exit_status;
    row.faithful = rr.ran && rr.faithful;
    if (!o.error.empty()) o.result["error"] = o.error;
    row.metrics = extract_metrics(o.result);
    row.result = o.result;
    try {
      store.add_run(s->id, row);  // (its attempt goes with it, in one transaction)
      attempt.stored = true;
    } catch (const StoreError&) {
      if (tty) fmt::print(stderr, "\r\033[K");
      throw;
    }
    ++res.ran;
    // (A replay that ran, and was not faithful, is left out of the figures: said so.)
    const std::string status = row.exit == "ok" && !row.faithful && !rr.unfaithful().empty()
                                   ? "not faithful (" + rr.unfaithful() + "): left out of the figures"
                                   : row.exit;
    if (!tty && !opt.quiet) {
      const auto m = row.metrics;
      fmt::print(stderr, "heaplab: run {}/{}: {}: {}{}\n", i + 1, todo.size(), what, status,
                 m.count("wall_s") ? fmt::format(", {:.3f} s", m.at("wall_s")) : "",
                 m.count("heap_peak_mib") ? fmt::format(", heap peak {:.1f} MiB", m.at("heap_peak_mib")) : "");
    } else if (tty && status != "ok") {
      fmt::print(stderr, "\r\033[Kheaplab: {}: {}{}\n", what, status, o.error.empty() ? "" : ": " + o.error);
    }
  }
  if (tty) fmt::print(stderr, "\r\033[K");
  res.interrupted = g_interrupted != 0;
  // Failed runs of the whole session, also those stored before a resume.
  for (const RunRecord& r : store.records(s->id))
    if (!r.ok) ++res.failed;
  if (int64_t(store.done_cells(s->id).size()) == res.cells) {
    store.finish_session(s->id);
    res.finished = true;
  }
  return res;
}

}  // namespace heaplab::experiments
