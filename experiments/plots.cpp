#include "experiments/plots.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "experiments/metrics.h"
#include "experiments/results.h"
#include "experiments/stats.h"
#include "experiments/web_page.h"
#include "replay/result.h"

namespace heaplab::experiments {

using nlohmann::json;

std::vector<std::string> write_plots(Store& store, const std::string& session, const std::vector<std::string>& metrics,
                                     const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw StoreError(dir + ": cannot create the plot directory: " + ec.message());
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
  json data = {{"title", "session " + session}, {"allocators", allocators}, {"traces", json::array()}};
  for (const std::string& t : traces) {
    json tr = {{"name", t}, {"heap", json::array()}, {"latency", json::array()}, {"metrics", json::array()}};
    for (const std::string& a : allocators) {
      auto& v = runs[{t, a}];
      if (v.empty()) continue;
      const std::optional<replay::ReplayResult> read = replay::try_result_from_json(median_run(v).result);
      if (!read) continue;  // a stored row this heaplab cannot read
      const replay::ReplayResult& r = *read;
      if (r.memory) {
        const replay::Timeline& tl = r.memory->timeline;
        json heap_mib = json::array();
        for (double kib : tl.heap_kib) heap_mib.push_back(kib / 1024);
        tr["heap"].push_back({{"allocator", a}, {"t_ms", tl.t_ms}, {"heap_mib", heap_mib}});
      }
      if (r.latency && r.latency->ops.count("malloc")) {
        const replay::OpLatency& o = r.latency->ops.at("malloc");
        json ns = json::array();
        for (const std::optional<double>& q : {o.p50, o.p90, o.p99, o.p999, o.p9999, o.max})
          ns.push_back(std::max(q.value_or(0.0), 1.0));
        tr["latency"].push_back({{"allocator", a}, {"ns", ns}});
      }
    }
    for (const std::string& m : metrics) {
      const Metric* mm = find_metric(m);
      if (!mm) continue;
      json bars = json::array();
      for (const std::string& a : allocators) {
        std::vector<double> v;
        for (const RunRow* r : runs[{t, a}])
          if (auto it = r->metrics.find(m); it != r->metrics.end()) v.push_back(it->second);
        if (v.empty()) continue;
        bars.push_back({{"allocator", a},
                        {"median", median(v)},
                        {"min", *std::min_element(v.begin(), v.end())},
                        {"max", *std::max_element(v.begin(), v.end())}});
      }
      if (!bars.empty())
        tr["metrics"].push_back({{"name", m}, {"label", mm->label}, {"unit", mm->unit}, {"bars", bars}});
    }
    data["traces"].push_back(tr);
  }
  const std::string path = (std::filesystem::path(dir) / "index.html").string();
  try {
    common::write_text(path, web_page(Page::plots, data));
  } catch (const std::runtime_error& e) {
    throw StoreError(path + ": cannot write the plots (" + e.what() + ")");
  }
  return {path};
}

}  // namespace heaplab::experiments
