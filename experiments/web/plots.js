// The report plots' page script (charts.js comes first): per trace, the heap
// RSS over time of each allocator's median run, its malloc latency
// percentiles, and per reported metric the medians with min-max whiskers;
// <body data-rendered="yes"> when all is drawn.
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);

function render() {
  document.getElementById("title").textContent = DATA.title;
  document.getElementById("meta").textContent = "bars: median; whiskers: min-max of the runs; time series: each allocator's median run";
  const main = document.getElementById("main");
  const color = a => COLORS[Math.max(0, DATA.allocators.indexOf(a)) % COLORS.length];
  for (const tr of DATA.traces) {
    el("h2", {}, main, `trace ${tr.name}`);
    legend(main, DATA.allocators, color);
    const grid = el("div", {class: "grid"}, main);
    if (tr.heap.length) {
      const card = el("div", {class: "card plot", "data-plot": "heap"}, grid);
      el("div", {class: "title"}, card, "heap RSS over time (MiB), median run");
      chart(card, "heap", 520, 260, {
        type: "line",
        data: {datasets: tr.heap.map(s => ({label: s.allocator, data: s.t_ms.map((t, i) => ({x: t, y: s.heap_mib[i]})),
                                            borderColor: color(s.allocator), backgroundColor: color(s.allocator),
                                            pointRadius: 0, borderWidth: 1.6}))},
        options: {plugins: {legend: {display: false}},
                  scales: {x: {type: "linear", title: {display: true, text: "time (ms)"}},
                           y: {title: {display: true, text: "heap RSS (MiB)"}, ticks: {callback: v => fmt(v)}}}},
      });
    }
    if (tr.latency.length) {
      const card = el("div", {class: "card plot", "data-plot": "malloc-latency"}, grid);
      el("div", {class: "title"}, card, "malloc latency percentiles (ns, log), median run");
      chart(card, "latency", 420, 260, {
        type: "line",
        data: {labels: ["p50", "p90", "p99", "p99.9", "p99.99", "max"],
               datasets: tr.latency.map(s => ({label: s.allocator, data: s.ns, borderColor: color(s.allocator),
                                               backgroundColor: color(s.allocator), pointRadius: 3, borderWidth: 1.6}))},
        options: {plugins: {legend: {display: false}},
                  scales: {y: {type: "logarithmic", ticks: {callback: v => fmt(v)}}}},
      });
    }
    for (const m of tr.metrics) {
      const card = el("div", {class: "card plot", "data-plot": m.name}, grid);
      el("div", {class: "title"}, card, m.label + (m.unit ? ` (${m.unit})` : ""));
      chart(card, "bars", 360, 240, {
        type: "bar",
        data: {labels: m.bars.map(b => b.allocator),
               datasets: [{label: "median", data: m.bars.map(b => b.median),
                           backgroundColor: m.bars.map(b => alpha(color(b.allocator), 0.7))},
                          {label: "min-max", data: m.bars.map(b => [b.min, b.max]), isBand: true, barThickness: 3,
                           grouped: false, backgroundColor: "#333"}]},
        options: {plugins: {legend: {display: false},
                            tooltip: {callbacks: {label: item => item.dataset.isBand
                                ? `min-max ${fmt(item.raw[0])}-${fmt(item.raw[1])}` : `median ${fmt(item.parsed.y)}`}}},
                  scales: {y: {beginAtZero: true, ticks: {callback: v => fmt(v)}}}},
      });
    }
  }
  markPainted();
  document.body.setAttribute("data-rendered", "yes");
}
render();
