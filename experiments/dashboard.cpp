#include "experiments/dashboard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include "experiments/history.h"
#include "experiments/metrics.h"
#include "experiments/results.h"
#include "experiments/stats.h"

#include "common/files.h"
#include "experiments/web_page.h"
#include "replay/result.h"

namespace heaplab::experiments {

namespace {

using nlohmann::json;

// At most `n` points of a timeline column (every k-th, and the last).
json thin(const json& col, size_t n) {
  if (!col.is_array() || col.size() <= n) return col;
  json out = json::array();
  const size_t step = (col.size() + n - 1) / n;
  for (size_t i = 0; i < col.size(); i += step) out.push_back(col[i]);
  out.push_back(col.back());
  return out;
}

// What a drill-down shows of one run: the heap timeline and latency.
json drill(const json& document) {
  json d = json::object();
  const std::optional<replay::ReplayResult> read = replay::try_result_from_json(document);
  if (!read) return d;  // a stored row this heaplab cannot read
  const replay::ReplayResult& r = *read;
  if (r.memory) {
    const replay::Timeline& tl = r.memory->timeline;
    if (!tl.t_ms.empty()) d["timeline"]["t_ms"] = thin(tl.t_ms, 400);
    if (!tl.heap_kib.empty()) d["timeline"]["heap_kib"] = thin(tl.heap_kib, 400);
    if (!tl.rss_kib.empty()) d["timeline"]["rss_kib"] = thin(tl.rss_kib, 400);
    if (!tl.live_bytes.empty()) d["timeline"]["live_bytes"] = thin(tl.live_bytes, 400);
  }
  if (r.latency)
    for (const auto& [op, o] : r.latency->ops) {
      json q = json::object();
      const std::pair<const char*, std::optional<double>> qs[] = {{"p50_ns", o.p50},      {"p90_ns", o.p90},
                                                                  {"p99_ns", o.p99},      {"p99.9_ns", o.p999},
                                                                  {"p99.99_ns", o.p9999}, {"max_ns", o.max}};
      for (const auto& [k, v] : qs)
        if (v) q[k] = *v;
      d["latency"][op] = q;
    }
  return d;
}

}  // namespace

json dashboard_data(Store& store, const std::string& store_path) {
  json data = {{"generated", utc_now_iso()}, {"store", store_path}, {"experiments", json::array()}};
  std::map<std::string, std::vector<SessionInfo>> by_exp;
  std::vector<std::string> order;
  for (const SessionInfo& s : store.sessions()) {
    if (s.stored == 0) continue;
    if (!by_exp.count(s.experiment)) order.push_back(s.experiment);
    by_exp[s.experiment].push_back(s);
  }
  for (const std::string& e : order) {
    const std::vector<SessionInfo>& ss = by_exp[e];
    json ex = {{"name", e}, {"baseline", ss.back().baseline}, {"sessions", json::array()}, {"traces", json::array()}};
    // Per session: its records, and per (trace, allocator) the run whose
    // wall time is the median, for the drill-down.
    std::vector<std::vector<RunRecord>> recs;
    std::vector<std::string> traces, allocators;
    json drills = json::object();  // trace -> session index -> allocator -> drill
    for (size_t si = 0; si < ss.size(); ++si) {
      const SessionInfo& s = ss[si];
      ex["sessions"].push_back({{"id", s.id},
                                {"started", s.started},
                                {"commit", s.git_commit},
                                {"host", s.host},
                                {"complete", !s.finished.empty()}});
      recs.push_back(store.records(s.id));
      for (const RunRecord& r : recs.back()) {  // matrix order, warm-ups included
        if (std::find(traces.begin(), traces.end(), r.trace) == traces.end()) traces.push_back(r.trace);
        if (std::find(allocators.begin(), allocators.end(), r.allocator) == allocators.end())
          allocators.push_back(r.allocator);
      }
      std::map<std::pair<std::string, std::string>, std::vector<const RunRow*>> runs_of;
      const std::vector<RunRow> rows = store.runs(s.id);
      for (const RunRow& r : rows)
        if (!r.warmup && r.exit == "ok" && r.faithful) runs_of[{r.trace, r.allocator}].push_back(&r);
      for (auto& [key, v] : runs_of) drills[key.first][std::to_string(si)][key.second] = drill(median_run(v).result);
    }
    // The newest complete session is the one judged; unfinished sessions
    // are drawn but neither judged nor part of the history.
    size_t newest = SIZE_MAX;
    for (size_t si = 0; si < ss.size(); ++si)
      if (!ss[si].finished.empty()) newest = si;
    // Change points in the history of the complete sessions, every metric.
    std::vector<std::string> ids, names;
    std::vector<std::vector<RunRecord>> complete;
    for (size_t si = 0; si < ss.size() && si <= newest; ++si)
      if (!ss[si].finished.empty()) {
        ids.push_back(ss[si].id);
        complete.push_back(recs[si]);
      }
    for (const Metric& m : all_metrics()) names.push_back(m.name);
    const std::vector<Step> steps = history_steps(ids, complete, names);
    for (const std::string& t : traces) {
      json tr = {{"name", t}, {"metrics", json::array()}, {"drill", drills.contains(t) ? drills[t] : json::object()}};
      for (const Metric& m : all_metrics()) {
        json series = json::array();
        for (const std::string& a : allocators) {
          json points = json::array();
          std::vector<SessionStat> hist;
          for (size_t si = 0; si < ss.size(); ++si) {
            std::vector<double> v;
            for (const RunRecord& r : recs[si])
              if (!r.warmup && r.ok && r.trace == t && r.allocator == a)
                if (auto it = r.metrics.find(m.name); it != r.metrics.end()) v.push_back(it->second);
            if (v.empty()) continue;
            SessionStat st{median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
                           v.size()};
            if (!ss[si].finished.empty() && si <= newest) hist.push_back(st);
            points.push_back({{"session", si}, {"median", st.median}, {"min", st.min}, {"max", st.max}, {"n", st.n}});
          }
          if (points.empty()) continue;
          // Judged only if this allocator is in the newest complete session.
          bool in_newest = false;
          for (const json& p : points) in_newest = in_newest || p["session"].get<size_t>() == newest;
          Verdict vd = in_newest ? judge(hist, m.lower_is_better) : Verdict{};
          if (!in_newest) vd.state = "absent";
          // Steps of the history, each with the session (and so the commit)
          // where the new level starts.
          json changes = json::array();
          for (const Step& st : steps) {
            if (st.trace != t || st.allocator != a || st.metric != m.name) continue;
            const size_t si =
                size_t(std::find_if(ss.begin(), ss.end(), [&](const SessionInfo& x) { return x.id == st.session; }) -
                       ss.begin());
            changes.push_back({{"session", si},
                               {"id", st.session},
                               {"commit", ss[si].git_commit},
                               {"started", ss[si].started},
                               {"before", st.before},
                               {"after", st.after},
                               {"change", st.change},
                               {"p", st.p},
                               {"state", st.regression ? "regression" : "improvement"}});
          }
          series.push_back({{"allocator", a},
                            {"points", points},
                            {"verdict",
                             {{"state", vd.state},
                              {"centre", vd.centre},
                              {"low", vd.low},
                              {"high", vd.high},
                              {"newest", vd.newest},
                              {"change", vd.change}}},
                            {"changes", changes}});
        }
        if (series.empty()) continue;
        tr["metrics"].push_back({{"name", m.name},
                                 {"label", m.label},
                                 {"unit", m.unit},
                                 {"lower_is_better", m.lower_is_better},
                                 {"series", series}});
      }
      ex["traces"].push_back(tr);
    }
    data["experiments"].push_back(ex);
  }
  return data;
}

DashboardSummary write_dashboard(Store& store, const std::string& store_path, const std::string& outdir) {
  DashboardSummary sum;
  json data = dashboard_data(store, store_path);
  for (const json& ex : data["experiments"]) {
    ++sum.experiments;
    sum.sessions += ex["sessions"].size();
    for (const json& tr : ex["traces"])
      for (const json& m : tr["metrics"])
        for (const json& s : m["series"]) {
          ++sum.series;
          for (const json& c : s["changes"])
            sum.change_points.push_back(fmt::format(
                "{}/{}/{}/{}: {:+.1f}% ({}) from session {} ({}{})", ex["name"].get<std::string>(),
                tr["name"].get<std::string>(), m["name"].get<std::string>(), s["allocator"].get<std::string>(),
                100 * c["change"].get<double>(), c["state"].get<std::string>(), c["id"].get<std::string>(),
                c["started"].get<std::string>(),
                c["commit"].get<std::string>().empty() ? ""
                                                       : ", commit " + c["commit"].get<std::string>().substr(0, 12)));
          if (s["verdict"]["state"] == "regression")
            sum.regressions.push_back(fmt::format("{}/{}/{}/{}: {:+.1f}%", ex["name"].get<std::string>(),
                                                  tr["name"].get<std::string>(), m["name"].get<std::string>(),
                                                  s["allocator"].get<std::string>(),
                                                  100 * s["verdict"]["change"].get<double>()));
        }
  }
  const std::string page = web_page(Page::dashboard, data);
  std::error_code ec;
  std::filesystem::create_directories(outdir, ec);
  if (ec) throw std::runtime_error(outdir + ": cannot create the dashboard directory: " + ec.message());
  sum.index = (std::filesystem::path(outdir) / "index.html").string();
  try {
    common::write_text(sum.index, page);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(sum.index + ": cannot write the dashboard (" + e.what() + ")");
  }
  return sum;
}

}  // namespace heaplab::experiments
