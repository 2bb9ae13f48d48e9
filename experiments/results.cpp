#include "experiments/results.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "experiments/metrics.h"

namespace heaplab::experiments {

SessionInfo pick_session(Store& store, const std::string& id, const std::string& experiment) {
  if (!id.empty()) {
    auto s = store.session(id);
    if (!s) throw StoreError("no session '" + id + "' in the results store (heaplab results list shows them)");
    return *s;
  }
  const std::vector<SessionInfo> all = store.sessions();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (experiment.empty() || it->experiment == experiment) return *it;
  throw StoreError(experiment.empty() ? "the results store has no sessions yet (heaplab run FILE.yaml makes one)"
                                      : "no session of experiment '" + experiment + "' in the results store");
}

std::string sessions_table(const std::vector<SessionInfo>& sessions) {
  size_t w = 7, e = 10;
  for (const SessionInfo& s : sessions) {
    w = std::max(w, s.id.size());
    e = std::max(e, s.experiment.size());
  }
  std::string out =
      fmt::format("{:<{}}  {:<{}}  {:<20}  {:>11}  {}\n", "session", w, "experiment", e, "started", "runs", "state");
  for (const SessionInfo& s : sessions)
    out += fmt::format("{:<{}}  {:<{}}  {:<20}  {:>11}  {}\n", s.id, w, s.experiment, e, s.started,
                       fmt::format("{}/{}", s.stored, s.cells),
                       !s.finished.empty() ? "finished " + s.finished
                       : s.shard.empty()   ? std::string("unfinished (heaplab run resumes it)")
                                           : "shard " + s.shard + " (heaplab results merge joins shards)");
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

const RunRow& median_run(std::vector<const RunRow*>& runs) {
  const auto wall = [](const RunRow* r) {
    const auto it = r->metrics.find("wall_s");
    return it == r->metrics.end() ? INFINITY : it->second;
  };
  std::sort(runs.begin(), runs.end(), [&](const RunRow* x, const RunRow* y) { return wall(x) < wall(y); });
  return *runs[runs.size() / 2];
}

std::string export_csv(Store& store, const std::string& session) {
  std::string out = "session,cell,trace,allocator,allocator_name,load,rep,warmup,exit,faithful,trace_id";
  for (const Metric& m : all_metrics()) out += "," + m.name;
  out += "\n";
  for (const RunRow& r : store.runs(session)) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{}", csv_field(session), csv_field(r.cell), csv_field(r.trace),
                       csv_field(r.allocator), csv_field(r.allocator_name), r.load, r.rep, r.warmup ? 1 : 0, r.exit,
                       r.faithful ? 1 : 0, r.trace_id);
    for (const Metric& m : all_metrics()) {
      auto it = r.metrics.find(m.name);
      out += it == r.metrics.end() ? "," : fmt::format(",{}", it->second);
    }
    out += "\n";
  }
  return out;
}

std::string export_gbench(Store& store, const std::string& session) {
  const SessionInfo s = pick_session(store, session, "");
  nlohmann::json benchmarks = nlohmann::json::array();
  const std::vector<RunRow> rows = store.runs(session);
  const auto counted = [](const RunRow& r) {
    return !r.warmup && r.exit == "ok" && r.faithful && r.metrics.count("wall_s");
  };
  // Per trace and allocator: its runs exported (Google Benchmark's
  // repetitions), and the replay threads each ran on.
  std::map<std::string, int64_t> repetitions;
  for (const RunRow& r : rows)
    if (counted(r)) ++repetitions[r.trace + "/" + r.allocator];
  for (const RunRow& r : rows) {
    if (!counted(r)) continue;
    int64_t threads = 1;
    if (r.result.contains("replay_threads") && r.result["replay_threads"].is_number_unsigned())
      threads = std::max<int64_t>(1, r.result["replay_threads"].get<int64_t>());
    nlohmann::json b = {{"name", r.trace + "/" + r.allocator},
                        {"run_name", r.trace + "/" + r.allocator},
                        {"run_type", "iteration"},
                        {"repetitions", repetitions[r.trace + "/" + r.allocator]},
                        {"repetition_index", r.rep},
                        {"threads", threads},
                        {"iterations", 1},
                        {"real_time", 1e3 * r.metrics.at("wall_s")},
                        {"cpu_time", 1e3 * (r.metrics.count("cpu_s") ? r.metrics.at("cpu_s") : r.metrics.at("wall_s"))},
                        {"time_unit", "ms"}};
    for (const auto& [k, v] : r.metrics)
      if (k != "wall_s" && k != "cpu_s") b[k] = v;
    benchmarks.push_back(b);
  }
  nlohmann::json j = {{"context",
                       {{"date", s.started},
                        {"host_name", s.host},
                        {"executable", "heaplab run (experiment " + s.experiment + ", session " + s.id + ")"},
                        {"library_build_type", "release"},
                        {"heaplab_version", s.heaplab_version},
                        {"git_commit", s.git_commit}}},
                      {"benchmarks", benchmarks}};
  return j.dump(2) + "\n";
}

}  // namespace heaplab::experiments
