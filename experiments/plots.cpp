#include "experiments/plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "experiments/metrics.h"
#include "experiments/results.h"
#include "experiments/stats.h"

#include "replay/result.h"

namespace heaplab::experiments {

namespace {

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                         "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr double W = 640, H = 360, L = 64, R = 150, T = 34, B = 44;

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s)
    o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return o;
}

std::string tick(double v) {
  const double a = std::fabs(v);
  return a >= 1000 ? fmt::format("{:.0f}", v) : a >= 10 ? fmt::format("{:.1f}", v) : fmt::format("{:.3g}", v);
}

struct Series {
  std::string name;
  std::vector<double> x, y;
};

// A line chart; log_y for latencies.
std::string line_chart(const std::string& title, const std::string& xlabel, const std::string& ylabel,
                       const std::vector<Series>& series, bool log_y, const std::vector<std::string>& xticks = {}) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (log_y && s.y[i] <= 0) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (!log_y) y0 = std::min(y0, 0.0);
  if (!(y1 > y0)) y1 = y0 + 1;
  const auto X = [&](double x) { return L + (W - L - R) * (x - x0) / (x1 - x0); };
  const auto Y = [&](double y) {
    const double f = log_y ? (std::log(y) - std::log(y0)) / (std::log(y1) - std::log(y0)) : (y - y0) / (y1 - y0);
    return T + (H - T - B) * (1 - f);
  };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
      W, H, L, esc(title));
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>\n", L, H - B, W - R, H - B);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>\n", L, T, L, H - B);
  for (int i = 0; i <= 4; ++i) {
    const double v = log_y ? std::exp(std::log(y0) + (std::log(y1) - std::log(y0)) * i / 4) : y0 + (y1 - y0) * i / 4;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", L - 4, Y(v) + 4, tick(v));
  }
  if (xticks.empty()) {
    for (int i = 0; i <= 4; ++i) {
      const double v = x0 + (x1 - x0) * i / 4;
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", X(v), H - B + 16, tick(v));
    }
  } else {
    for (size_t i = 0; i < xticks.size(); ++i)
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", X(double(i)), H - B + 16,
                       esc(xticks[i]));
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (L + W - R) / 2, H - 8, esc(xlabel));
  s += fmt::format("<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>\n",
                   (T + H - B) / 2, (T + H - B) / 2, esc(ylabel));
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& se = series[k];
    const char* c = kColors[k % 10];
    std::string pts;
    for (size_t i = 0; i < se.x.size(); ++i)
      if (!log_y || se.y[i] > 0) pts += fmt::format("{:.1f},{:.1f} ", X(se.x[i]), Y(se.y[i]));
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" points=\"{}\"/>\n", c, pts);
    s += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        W - R + 12, T + 16 * double(k), c, W - R + 26, T + 16 * double(k) + 9, esc(se.name));
  }
  return s + "</svg>\n";
}

struct Bar {
  std::string name;
  double median, lo, hi;
};

std::string bar_chart(const std::string& title, const std::string& ylabel, const std::vector<Bar>& bars) {
  double y1 = 0;
  for (const Bar& b : bars) y1 = std::max({y1, b.hi, b.median});
  if (!(y1 > 0)) y1 = 1;
  y1 *= 1.1;
  const double plot_w = W - L - 20, slot = plot_w / double(std::max<size_t>(1, bars.size()));
  const auto Y = [&](double y) { return T + (H - T - B) * (1 - y / y1); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
      W, H, L, esc(title));
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>\n", L, H - B, W - 20, H - B);
  for (int i = 0; i <= 4; ++i)
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", L - 4, Y(y1 * i / 4) + 4,
                     tick(y1 * i / 4));
  s += fmt::format("<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>\n",
                   (T + H - B) / 2, (T + H - B) / 2, esc(ylabel));
  for (size_t k = 0; k < bars.size(); ++k) {
    const Bar& b = bars[k];
    const double cx = L + slot * (double(k) + 0.5), bw = slot * 0.6;
    s += fmt::format("<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n",
                     cx - bw / 2, Y(b.median), bw, H - B - Y(b.median), kColors[k % 10]);
    s += fmt::format(
        "<line class=\"err\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\"/>"
        "<line x1=\"{3:.1f}\" x2=\"{4:.1f}\" y1=\"{1:.1f}\" y2=\"{1:.1f}\" stroke=\"#000\"/>"
        "<line x1=\"{3:.1f}\" x2=\"{4:.1f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\"/>\n",
        cx, Y(b.hi), Y(b.lo), cx - bw / 6, cx + bw / 6);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", cx, H - B + 16, esc(b.name));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"10\">{}</text>\n", cx,
                     Y(b.hi) - 4, tick(b.median));
  }
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">bars: median; whiskers: "
      "min-max of the runs</text>\n",
      (L + W) / 2, H - 8);
  return s + "</svg>\n";
}

std::string file_name(const std::string& s) {
  std::string o;
  for (char c : s) o += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return o;
}

}  // namespace

std::vector<std::string> write_plots(Store& store, const std::string& session, const std::vector<std::string>& metrics,
                                     const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw StoreError(dir + ": cannot create the plot directory: " + ec.message());
  std::vector<std::string> written;
  const auto put = [&](const std::string& name, const std::string& svg) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream f(path, std::ios::trunc);
    f << svg;
    if (!f.flush()) throw StoreError(path + ": cannot write the plot");
    written.push_back(path);
  };
  const std::vector<RunRow> rows = store.runs(session);
  std::vector<std::string> traces, allocators;
  std::map<std::pair<std::string, std::string>, std::vector<const RunRow*>> runs;
  for (const RunRow& r : rows) {
    // The matrix order, warm-ups included: the first round has the
    // allocators in the experiment's order.
    if (std::find(traces.begin(), traces.end(), r.trace) == traces.end()) traces.push_back(r.trace);
    if (std::find(allocators.begin(), allocators.end(), r.allocator) == allocators.end())
      allocators.push_back(r.allocator);
    if (r.warmup || r.exit != "ok" || !r.faithful) continue;
    runs[{r.trace, r.allocator}].push_back(&r);
  }
  for (const std::string& t : traces) {
    std::vector<Series> heap, lat;
    for (const std::string& a : allocators) {
      auto& v = runs[{t, a}];
      if (v.empty()) continue;
      const replay::ReplayResult r = replay::result_from_json(median_run(v).result);
      if (r.memory) {
        const replay::Timeline& tl = r.memory->timeline;
        Series s{a, {}, {}};
        for (size_t i = 0; i < tl.t_ms.size() && i < tl.heap_kib.size(); ++i) {
          s.x.push_back(tl.t_ms[i]);
          s.y.push_back(tl.heap_kib[i] / 1024);
        }
        heap.push_back(s);
      }
      if (r.latency && r.latency->ops.count("malloc")) {
        const replay::OpLatency& o = r.latency->ops.at("malloc");
        Series s{a, {}, {}};
        int i = 0;
        for (const std::optional<double>& q : {o.p50, o.p90, o.p99, o.p999, o.p9999, o.max}) {
          s.x.push_back(i++);
          s.y.push_back(std::max(q.value_or(0.0), 1.0));
        }
        lat.push_back(s);
      }
    }
    if (!heap.empty())
      put(file_name(t) + "-heap.svg",
          line_chart(t + ": heap RSS over time (median run)", "time (ms)", "heap RSS (MiB)", heap, false));
    if (!lat.empty())
      put(file_name(t) + "-malloc-latency.svg",
          line_chart(t + ": malloc latency percentiles (median run)", "percentile", "ns (log scale)", lat, true,
                     {"p50", "p90", "p99", "p99.9", "p99.99", "max"}));
    for (const std::string& m : metrics) {
      const Metric* mm = find_metric(m);
      if (!mm) continue;
      std::vector<Bar> bars;
      for (const std::string& a : allocators) {
        std::vector<double> v;
        for (const RunRow* r : runs[{t, a}])
          if (auto it = r->metrics.find(m); it != r->metrics.end()) v.push_back(it->second);
        if (v.empty()) continue;
        bars.push_back({a, median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())});
      }
      if (!bars.empty())
        put(file_name(t) + "-" + m + ".svg",
            bar_chart(t + ": " + mm->label, mm->unit.empty() ? mm->label : mm->unit, bars));
    }
  }
  return written;
}

}  // namespace heaplab::experiments
