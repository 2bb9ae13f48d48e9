// The dashboard's page script: draws every chart with Chart.js from the
// JSON heaplab put in <script id="data">; <body data-rendered="yes"> when
// all is done (the dashboard test reads that and each canvas's data-points
// and data-drawn).
// (charts.js comes first: el, fmt, alpha, legend, chart, markPainted.)
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);

// Each metric's history: medians per session (points to click), min-max of
// the runs as floating bars, the noise band of the judged history, and its
// change points.
function historyChart(card, ex, tr, m, labels, color) {
  const datasets = [];
  for (const s of m.series) {
    const c = color(s.allocator), v = s.verdict;
    if (v.state !== "short" && v.state !== "absent") {
      const first = s.points[0].session, last = s.points[s.points.length - 1].session;
      const span = labels.map((_, i) => (i >= first && i <= last ? v.low : null));
      const top = labels.map((_, i) => (i >= first && i <= last ? v.high : null));
      datasets.push({type: "line", label: `${s.allocator} band`, data: span, isBand: true, borderWidth: 0,
                     pointRadius: 0, spanGaps: false, backgroundColor: alpha(c, 0.12)});
      datasets.push({type: "line", label: `${s.allocator} band`, data: top, isBand: true, borderWidth: 0,
                     pointRadius: 0, spanGaps: false, fill: "-1", backgroundColor: alpha(c, 0.12)});
    }
    const spread = labels.map(() => null), medians = labels.map(() => null);
    for (const p of s.points) {
      spread[p.session] = [p.min, p.max];
      medians[p.session] = p.median;
    }
    datasets.push({type: "bar", label: `${s.allocator} min-max`, data: spread, isBand: true, barThickness: 2,
                   backgroundColor: alpha(c, 0.5), grouped: false});
    datasets.push({type: "line", label: s.allocator, data: medians, borderColor: c, backgroundColor: c,
                   pointRadius: 3.5, pointHoverRadius: 5, borderWidth: 1.6, spanGaps: true,
                   allocator: s.allocator, runs: s.points});
    // Change points: a triangle on the first session of each new level,
    // red for a regression, green for an improvement.
    if (s.changes && s.changes.length) {
      const at = labels.map(() => null), colors = labels.map(() => "#000"), byIndex = {};
      for (const ch of s.changes) {
        at[ch.session] = ch.after;
        colors[ch.session] = ch.state === "regression" ? "#c00" : "#080";
        byIndex[ch.session] = ch;
      }
      datasets.push({type: "line", label: `${s.allocator} change point`, data: at, showLine: false,
                     pointStyle: "triangle", pointRadius: 8, pointHoverRadius: 9,
                     pointBackgroundColor: ctx => colors[ctx.dataIndex], pointBorderColor: ctx => colors[ctx.dataIndex],
                     backgroundColor: "#c00", borderColor: "#c00", order: -1, isChange: true, changes: byIndex});
    }
  }
  chart(card, "history", 420, 220, {
    type: "line",
    data: {labels, datasets},
    options: {
      plugins: {legend: {display: false},
                tooltip: {filter: item => !item.dataset.isBand,
                          callbacks: {label: item => item.dataset.isChange ? changeText(item.dataset.changes[item.dataIndex])
                                                                          : `${item.dataset.label}: ${fmt(item.parsed.y)}`}}},
      scales: {y: {beginAtZero: false, ticks: {callback: v => fmt(v)}}},
      onClick: (event, elements, c) => {
        const hit = elements.find(e => !c.data.datasets[e.datasetIndex].isBand && !c.data.datasets[e.datasetIndex].isChange);
        if (hit) showDrill(ex, tr, hit.index);
      },
    },
  });
}

function pct(x) { return `${x * 100 >= 0 ? "+" : ""}${(x * 100).toFixed(1)}%`; }
function changeText(ch) {
  return `step ${pct(ch.change)} (${ch.state}): ${fmt(ch.before)} -> ${fmt(ch.after)} from session ${ch.id} ` +
         `(${ch.started.slice(0, 10)}${ch.commit ? ", commit " + ch.commit.slice(0, 12) : ""}), p = ${ch.p.toFixed(3)}`;
}

function showDrill(ex, tr, si) {
  const box = document.getElementById("drill");
  box.innerHTML = "";
  const s = ex.sessions[si];
  el("b", {}, box, `Drill-down: ${ex.name} / ${tr.name}, session ${s.id} (${s.started}${s.commit ? ", " + s.commit : ""})`);
  const d = tr.drill[String(si)] || {};
  const allocs = Object.keys(d);
  const color = a => COLORS[Math.max(0, ex.allocators.indexOf(a)) % COLORS.length];
  const grid = el("div", {class: "grid"}, box);

  const c1 = el("div", {class: "card"}, grid);
  el("div", {class: "title"}, c1, "heap RSS over time (MiB), live bytes dashed");
  const heap = [];
  for (const a of allocs) {
    const tl = d[a].timeline;
    if (!tl || !tl.t_ms || !tl.heap_kib) continue;
    heap.push({label: a, data: tl.t_ms.map((t, i) => ({x: t, y: tl.heap_kib[i] / 1024})), borderColor: color(a),
               backgroundColor: color(a), pointRadius: 0, borderWidth: 1.6});
  }
  const first = allocs.find(a => d[a].timeline && d[a].timeline.live_bytes);
  if (first) {
    const tl = d[first].timeline;
    heap.push({label: "live bytes", data: tl.t_ms.map((t, i) => ({x: t, y: tl.live_bytes[i] / 1048576})),
               borderColor: "#000", borderDash: [4, 3], pointRadius: 0, borderWidth: 1.2});
  }
  if (heap.length)
    chart(c1, "drill-rss", 520, 240, {
      type: "line",
      data: {datasets: heap},
      options: {parsing: true, plugins: {legend: {display: false}},
                scales: {x: {type: "linear", title: {display: true, text: "ms"}}, y: {ticks: {callback: v => fmt(v)}}}},
    });
  legend(c1, allocs, color);

  const c2 = el("div", {class: "card"}, grid);
  el("div", {class: "title"}, c2, "malloc latency percentiles (ns, log)");
  const qs = ["p50_ns", "p90_ns", "p99_ns", "p99.9_ns", "p99.99_ns", "max_ns"];
  const lat = [];
  for (const a of allocs) {
    const l = d[a].latency && d[a].latency.malloc;
    if (!l) continue;
    lat.push({label: a, data: qs.map(q => Math.max(l[q] || 0, 1)), borderColor: color(a), backgroundColor: color(a),
              pointRadius: 3, borderWidth: 1.6});
  }
  if (lat.length)
    chart(c2, "drill-latency", 420, 240, {
      type: "line",
      data: {labels: ["p50", "p90", "p99", "p99.9", "p99.99", "max"], datasets: lat},
      options: {plugins: {legend: {display: false}}, scales: {y: {type: "logarithmic", ticks: {callback: v => fmt(v)}}}},
    });
  else el("div", {class: "meta"}, c2, "no latency measured in this session (replay.latency in the experiment file)");
  markPainted();
}

function render() {
  document.getElementById("meta").textContent = `generated ${DATA.generated} from ${DATA.store}`;
  const alerts = document.getElementById("alerts");
  const main = document.getElementById("main");
  let nreg = 0, nsteps = 0, firstDrill = null;
  for (const ex of DATA.experiments) {
    ex.allocators = [];
    for (const tr of ex.traces)
      for (const m of tr.metrics)
        for (const s of m.series)
          if (!ex.allocators.includes(s.allocator)) ex.allocators.push(s.allocator);
    const color = a => COLORS[Math.max(0, ex.allocators.indexOf(a)) % COLORS.length];
    el("h2", {}, main, `experiment ${ex.name}`);
    el("div", {class: "meta"}, main,
       `${ex.sessions.length} session(s), newest ${ex.sessions[ex.sessions.length - 1].started}; baseline ${ex.baseline}`);
    const labels = ex.sessions.map(s => s.started.slice(5, 10) + (s.commit ? " " + s.commit.slice(0, 7) : ""));
    for (const tr of ex.traces) {
      el("h3", {}, main, `trace ${tr.name}`);
      legend(main, ex.allocators, color);
      const grid = el("div", {class: "grid"}, main);
      for (const m of tr.metrics) {
        const card = el("div", {class: "card metric", "data-metric": m.name}, grid);
        el("div", {class: "title"}, card,
           m.label + (m.unit ? ` (${m.unit})` : "") + (m.lower_is_better ? "" : ", higher is better"));
        const vs = el("div", {}, card);
        for (const s of m.series) {
          const v = s.verdict;
          const txt = v.state === "short" ? `${s.allocator}: history too short`
                      : v.state === "absent" ? `${s.allocator}: not in the newest session`
                      : `${s.allocator}: ${v.state}` +
                            (v.state !== "steady" ? ` ${v.change * 100 >= 0 ? "+" : ""}${(v.change * 100).toFixed(1)}%` : "");
          el("span", {class: "verdict " + v.state, "data-allocator": s.allocator}, vs, txt);
          if (v.state === "regression") {
            nreg++;
            el("li", {class: "regression"}, alerts,
               `regression: ${ex.name} / ${tr.name} / ${m.label} / ${s.allocator}: ${fmt(v.newest)} against ` +
                   `${fmt(v.centre)} (band ${fmt(v.low)}-${fmt(v.high)})`);
          }
        }
        for (const s of m.series)
          for (const ch of s.changes || []) {
            el("div", {class: "change " + ch.state, "data-allocator": s.allocator}, card, `${s.allocator}: ${changeText(ch)}`);
            if (ch.state === "regression") {
              nsteps++;
              el("li", {class: "change regression"}, alerts,
                 `change point: ${ex.name} / ${tr.name} / ${m.label} / ${s.allocator}: ${changeText(ch)}`);
            }
          }
        historyChart(card, ex, tr, m, labels, color);
      }
      // The drill-down opens on the newest session of all (the run just made),
      // its first trace.
      const newest = ex.sessions[ex.sessions.length - 1];
      if (!firstDrill || newest.started > firstDrill[0].sessions[firstDrill[2]].started)
        firstDrill = [ex, tr, ex.sessions.length - 1];
    }
  }
  if (!DATA.experiments.length) el("p", {}, main, "The results store has no runs yet: heaplab run experiments/quick-start.yaml");
  if (nreg === 0)
    el("li", {class: "none"}, alerts,
       "no regressions: every newest session is within the noise band of its history (or the history is too short)");
  if (nsteps === 0)
    el("li", {class: "none"}, alerts, "no step for the worse in any history (change points: E-divisive means, p <= 0.01)");
  if (firstDrill) showDrill(...firstDrill);
  markPainted();
  document.body.setAttribute("data-rendered", "yes");
}
render();
