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
  const replay::ReplayResult r = replay::result_from_json(document);
  json d = json::object();
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
          series.push_back({{"allocator", a},
                            {"points", points},
                            {"verdict",
                             {{"state", vd.state},
                              {"centre", vd.centre},
                              {"low", vd.low},
                              {"high", vd.high},
                              {"newest", vd.newest},
                              {"change", vd.change}}}});
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

namespace {

const char* kPage = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>heaplab dashboard</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 24px 40px; color: #222; background: #fafafa; }
h1 { font-size: 22px; margin: 18px 0 4px; }
h2 { font-size: 18px; margin: 28px 0 6px; border-bottom: 1px solid #ccc; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #666; font-size: 12px; }
.grid { display: flex; flex-wrap: wrap; gap: 14px; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px 10px; }
.card .title { font-weight: 600; margin-bottom: 2px; }
.verdict { display: inline-block; font-size: 12px; padding: 1px 6px; border-radius: 3px; margin: 1px 4px 1px 0; }
.verdict.regression { background: #fdd; color: #a00; font-weight: 700; }
.verdict.improvement { background: #dfd; color: #060; }
.verdict.steady { background: #eee; color: #555; }
.verdict.short, .verdict.absent { background: #f4f4f4; color: #999; }
#alerts li.regression { color: #a00; }
svg.chart { display: block; }
svg.chart .axis { stroke: #999; stroke-width: 1; }
svg.chart text { font-size: 10px; fill: #555; }
svg.chart circle.pt { cursor: pointer; }
#drill { position: sticky; top: 0; background: #fff; border: 1px solid #bbb; padding: 8px 10px; margin-top: 10px; z-index: 1; }
.legend span { margin-right: 10px; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 3px; border-radius: 2px; }
</style>
</head>
<body>
<h1>heaplab dashboard</h1>
<div class="meta" id="meta"></div>
<ul id="alerts"></ul>
<div id="drill"><b>Drill-down</b>: click a point of a chart to see that session's heap over time and latency.</div>
<div id="main"></div>
<script id="data" type="application/json">@DATA@</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
const NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, parent, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(NS, tag.slice(4)) : document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function fmt(v) {
  if (v === null || v === undefined || isNaN(v)) return "-";
  const a = Math.abs(v);
  return a >= 1000 ? v.toFixed(0) : a >= 100 ? v.toFixed(1) : a >= 1 ? v.toFixed(2) : v.toPrecision(3);
}
// A line chart: series [{name, color, points: [{x, y, lo, hi, onclick}]}], x categorical labels.
function lineChart(parent, opt) {
  const W = opt.width || 420, H = opt.height || 220, L = 52, R = 10, T = 10, B = 34;
  const svg = el("svg:svg", {class: "chart " + (opt.cls || ""), width: W, height: H, viewBox: `0 0 ${W} ${H}`}, parent);
  let ys = [];
  for (const s of opt.series) for (const p of s.points) ys.push(p.y, p.lo ?? p.y, p.hi ?? p.y);
  for (const b of opt.bands || []) ys.push(b.lo, b.hi);
  ys = ys.filter(v => isFinite(v));
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (opt.logy) { ys = ys.filter(v => v > 0); y0 = Math.min(...ys); y1 = Math.max(...ys); }
  if (!(y1 > y0)) { y1 = y0 + (Math.abs(y0) || 1) * 0.1; y0 = y0 - (Math.abs(y0) || 1) * 0.1; }
  if (!opt.logy && y0 > 0 && y0 < (y1 - y0)) y0 = 0;
  const pad = (y1 - y0) * 0.06;
  if (!opt.logy) { y0 -= y0 === 0 ? 0 : pad; y1 += pad; }
  const n = opt.xs.length, xmin = opt.xmin ?? 0, xmax = opt.xmax ?? Math.max(1, n - 1);
  const X = x => L + (W - L - R) * (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0.5);
  const Y = opt.logy ? y => T + (H - T - B) * (1 - (Math.log(y) - Math.log(y0)) / (Math.log(y1) - Math.log(y0) || 1))
                     : y => T + (H - T - B) * (1 - (y - y0) / (y1 - y0));
  el("svg:line", {class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B}, svg);
  el("svg:line", {class: "axis", x1: L, y1: T, x2: L, y2: H - B}, svg);
  for (let i = 0; i <= 4; i++) {
    const v = opt.logy ? Math.exp(Math.log(y0) + (Math.log(y1) - Math.log(y0)) * i / 4) : y0 + (y1 - y0) * i / 4;
    el("svg:text", {x: L - 4, y: Y(v) + 3, "text-anchor": "end"}, svg, fmt(v));
  }
  const every = Math.max(1, Math.ceil(opt.xs.length / 6));
  opt.xs.forEach((lab, i) => { if (i % every === 0 || i === n - 1) el("svg:text", {x: X(opt.xv ? opt.xv[i] : i), y: H - B + 14, "text-anchor": "middle"}, svg, lab); });
  if (opt.xtitle) el("svg:text", {x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle"}, svg, opt.xtitle);
  for (const b of opt.bands || [])
    el("svg:rect", {class: "band", x: X(b.x0), width: Math.max(4, X(b.x1) - X(b.x0)), y: Y(b.hi), height: Math.max(1, Y(b.lo) - Y(b.hi)), fill: b.color, "fill-opacity": 0.12}, svg);
  for (const s of opt.series) {
    const pts = s.points.filter(p => isFinite(p.y) && (!opt.logy || p.y > 0));
    if (pts.length > 1) el("svg:polyline", {class: "line", fill: "none", stroke: s.color, "stroke-width": 1.6, points: pts.map(p => `${X(p.x)},${Y(p.y)}`).join(" ")}, svg);
    for (const p of pts) {
      if (p.lo !== undefined && p.hi !== undefined && p.hi > p.lo)
        el("svg:line", {x1: X(p.x), x2: X(p.x), y1: Y(p.hi), y2: Y(Math.max(p.lo, opt.logy ? y0 : -Infinity)), stroke: s.color, "stroke-opacity": 0.5}, svg);
      if (opt.dots !== false) {
        const c = el("svg:circle", {class: "pt", cx: X(p.x), cy: Y(p.y), r: 3.2, fill: s.color}, svg);
        el("svg:title", {}, c, `${s.name}: ${fmt(p.y)}` + (p.lo !== undefined ? ` [${fmt(p.lo)}-${fmt(p.hi)}]` : "") + (p.label ? ` (${p.label})` : ""));
        if (p.onclick) c.addEventListener("click", p.onclick);
      }
    }
  }
  return svg;
}
function legend(parent, names, colorOf) {
  const d = el("div", {class: "legend"}, parent);
  for (const n of names) { const s = el("span", {}, d); el("i", {style: `background:${colorOf(n)}`}, s); s.appendChild(document.createTextNode(n)); }
}
function showDrill(ex, tr, si, alloc) {
  const box = document.getElementById("drill");
  box.innerHTML = "";
  const s = ex.sessions[si];
  el("b", {}, box, `Drill-down: ${ex.name} / ${tr.name}, session ${s.id} (${s.started}${s.commit ? ", " + s.commit : ""})`);
  const d = (tr.drill[String(si)] || {});
  const allocs = Object.keys(d);
  const color = a => COLORS[Math.max(0, ex.allocators.indexOf(a)) % COLORS.length];
  const grid = el("div", {class: "grid"}, box);
  const c1 = el("div", {class: "card"}, grid);
  el("div", {class: "title"}, c1, "heap RSS over time (MiB), live bytes dashed");
  const series = [], all_t = [];
  for (const a of allocs) {
    const tl = d[a].timeline; if (!tl || !tl.t_ms) continue;
    series.push({name: a, color: color(a), points: tl.t_ms.map((t, i) => ({x: t, y: tl.heap_kib[i] / 1024}))});
    all_t.push(...tl.t_ms);
  }
  const first = allocs.find(a => d[a].timeline && d[a].timeline.live_bytes);
  if (first) { const tl = d[first].timeline; series.push({name: "live bytes", color: "#000", points: tl.t_ms.map((t, i) => ({x: t, y: tl.live_bytes[i] / 1048576}))}); }
  if (series.length) {
    const tmax = Math.max(...all_t, 1);
    lineChart(c1, {cls: "drill-rss", width: 520, xs: ["0", fmt(tmax / 2), fmt(tmax)], xv: [0, tmax / 2, tmax], xmin: 0, xmax: tmax, xtitle: "ms", series, dots: false});
  }
  legend(c1, allocs, color);
  const c2 = el("div", {class: "card"}, grid);
  el("div", {class: "title"}, c2, "malloc latency percentiles (ns, log)");
  const qs = ["p50_ns", "p90_ns", "p99_ns", "p99.9_ns", "p99.99_ns", "max_ns"];
  const lat = [];
  for (const a of allocs) {
    const l = d[a].latency && d[a].latency.malloc; if (!l) continue;
    lat.push({name: a, color: color(a), points: qs.map((q, i) => ({x: i, y: Math.max(l[q] || 0, 1)}))});
  }
  if (lat.length) lineChart(c2, {cls: "drill-latency", width: 420, xs: ["p50", "p90", "p99", "p99.9", "p99.99", "max"], series: lat, logy: true});
  else el("div", {class: "meta"}, c2, "no latency measured in this session (replay.latency in the experiment file)");
}
function render() {
  const meta = document.getElementById("meta");
  meta.textContent = `generated ${DATA.generated} from ${DATA.store}`;
  const alerts = document.getElementById("alerts");
  const main = document.getElementById("main");
  let nreg = 0, firstDrill = null;
  for (const ex of DATA.experiments) {
    ex.allocators = [];
    for (const tr of ex.traces) for (const m of tr.metrics) for (const s of m.series) if (!ex.allocators.includes(s.allocator)) ex.allocators.push(s.allocator);
    const color = a => COLORS[Math.max(0, ex.allocators.indexOf(a)) % COLORS.length];
    el("h2", {}, main, `experiment ${ex.name}`);
    el("div", {class: "meta"}, main, `${ex.sessions.length} session(s), newest ${ex.sessions[ex.sessions.length - 1].started}; baseline ${ex.baseline}`);
    const xs = ex.sessions.map(s => s.started.slice(5, 10) + (s.commit ? " " + s.commit.slice(0, 7) : ""));
    for (const tr of ex.traces) {
      el("h3", {}, main, `trace ${tr.name}`);
      legend(main, ex.allocators, color);
      const grid = el("div", {class: "grid"}, main);
      for (const m of tr.metrics) {
        const card = el("div", {class: "card metric", "data-metric": m.name}, grid);
        el("div", {class: "title"}, card, m.label + (m.unit ? ` (${m.unit})` : "") + (m.lower_is_better ? "" : ", higher is better"));
        const vs = el("div", {}, card);
        const bands = [];
        for (const s of m.series) {
          const v = s.verdict;
          const txt = v.state === "short" ? `${s.allocator}: history too short` :
                      v.state === "absent" ? `${s.allocator}: not in the newest session` :
                      `${s.allocator}: ${v.state}` + (v.state !== "steady" ? ` ${(v.change * 100 >= 0 ? "+" : "")}${(v.change * 100).toFixed(1)}%` : "");
          el("span", {class: "verdict " + v.state, "data-allocator": s.allocator}, vs, txt);
          if (v.state === "regression") {
            nreg++;
            const li = el("li", {class: "regression"}, alerts, `regression: ${ex.name} / ${tr.name} / ${m.label} / ${s.allocator}: ${fmt(v.newest)} against ${fmt(v.centre)} (band ${fmt(v.low)}-${fmt(v.high)})`);
          }
          if (v.state !== "short" && v.state !== "absent") {
            const last = s.points[s.points.length - 1].session;
            bands.push({x0: s.points[0].session, x1: last, lo: v.low, hi: v.high, color: color(s.allocator)});
          }
        }
        lineChart(card, {cls: "history", xs, bands, series: m.series.map(s => ({name: s.allocator, color: color(s.allocator),
          points: s.points.map(p => ({x: p.session, y: p.median, lo: p.min, hi: p.max, label: `${p.n} runs`,
                                      onclick: () => showDrill(ex, tr, p.session, s.allocator)}))}))});
      }
      if (!firstDrill) firstDrill = [ex, tr, ex.sessions.length - 1];
    }
  }
  if (!DATA.experiments.length) el("p", {}, main, "The results store has no runs yet: heaplab run experiments/quick-start.yaml");
  if (nreg === 0) el("li", {class: "none"}, alerts, "no regressions: every newest session is within the noise band of its history (or the history is too short)");
  if (firstDrill) showDrill(...firstDrill);
  document.body.setAttribute("data-rendered", "yes");
}
render();
</script>
</body>
</html>
)HTML";

}  // namespace

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
          if (s["verdict"]["state"] == "regression")
            sum.regressions.push_back(fmt::format("{}/{}/{}/{}: {:+.1f}%", ex["name"].get<std::string>(),
                                                  tr["name"].get<std::string>(), m["name"].get<std::string>(),
                                                  s["allocator"].get<std::string>(),
                                                  100 * s["verdict"]["change"].get<double>()));
        }
  }
  // The data sits in a <script> element: no "<" at all in it, so nothing
  // in a string (a path, an id) can end or reshape it.
  const std::string raw = data.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string text;
  for (char ch : raw) text += ch == '<' ? std::string("\\u003c") : std::string(1, ch);
  std::string page = kPage;
  page.replace(page.find("@DATA@"), 6, text);
  std::error_code ec;
  std::filesystem::create_directories(outdir, ec);
  if (ec) throw std::runtime_error(outdir + ": cannot create the dashboard directory: " + ec.message());
  sum.index = (std::filesystem::path(outdir) / "index.html").string();
  const std::string tmp = sum.index + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << page;
    if (!f.flush()) throw std::runtime_error(sum.index + ": cannot write the dashboard");
  }
  std::filesystem::rename(tmp, sum.index, ec);
  if (ec) throw std::runtime_error(sum.index + ": cannot write the dashboard: " + ec.message());
  return sum;
}

}  // namespace heaplab::experiments
