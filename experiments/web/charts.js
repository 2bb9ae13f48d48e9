// Helpers shared by heaplab's pages (the dashboard, report plots): DOM
// building, number formatting, and charts drawn by Chart.js (no chart code
// of heaplab's own). Each chart's canvas says what it drew: data-points (the
// points of its data sets, bands and whiskers not counted), data-points-each
// ("label:points" per data set) and, after
// markPainted(), data-drawn="yes" once pixels were painted.
"use strict";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
                "#bcbd22"];
const drawn = [];  // charts, to mark their canvases once painted

function el(tag, attrs, parent, text) {
  const e = document.createElement(tag);
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
function alpha(color, a) {  // "#rrggbb" -> rgba
  const n = parseInt(color.slice(1), 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}
function legend(parent, names, colorOf) {
  const d = el("div", {class: "legend"}, parent);
  for (const n of names) {
    const s = el("span", {}, d);
    el("i", {style: `background:${colorOf(n)}`}, s);
    s.appendChild(document.createTextNode(n));
  }
}
// A Chart.js chart on a new canvas of `cls`, without animation (drawn at
// once), of a fixed size.
function chart(parent, cls, width, height, config) {
  const canvas = el("canvas", {class: "chart " + cls, width, height}, parent);
  config.options = Object.assign({animation: false, responsive: false, maintainAspectRatio: false}, config.options);
  const c = new Chart(canvas.getContext("2d"), config);
  let points = 0;
  const each = [];
  c.data.datasets.forEach((ds, i) => {
    if (ds.isBand) return;
    const n = c.getDatasetMeta(i).data.length;
    points += n;
    each.push(`${ds.label}:${n}`);
  });
  canvas.setAttribute("data-points", String(points));
  canvas.setAttribute("data-points-each", each.join(","));
  drawn.push(c);
  return c;
}
// Whether the canvas holds painted pixels (Chart.js drew into it).
function painted(canvas) {
  const ctx = canvas.getContext("2d");
  const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
  for (let i = 3; i < px.length; i += 4)
    if (px[i] !== 0) return true;
  return false;
}

function markPainted() {
  for (const c of drawn) c.canvas.setAttribute("data-drawn", painted(c.canvas) ? "yes" : "no");
}
