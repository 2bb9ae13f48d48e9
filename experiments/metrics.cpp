#include "experiments/metrics.h"

#include <fmt/format.h>

#include <cmath>

#include "replay/result.h"

namespace heaplab::experiments {

using nlohmann::json;

const std::vector<Metric>& all_metrics() {
  static const std::vector<Metric> m = {
      {"wall_s", "wall time", "s", true, 15},
      {"mcalls_per_s", "calls per second", "M/s", false, 0},
      {"cpu_s", "CPU time", "s", true, 0},
      {"heap_peak_mib", "heap peak", "MiB", true, 10},
      {"heap_at_live_peak_mib", "heap at the live peak", "MiB", true, 0},
      {"frag_at_live_peak", "fragmentation at the live peak", "", true, 15},
      {"frag_time_weighted", "fragmentation, time-weighted", "", true, 0},
      {"heap_final_mib", "heap at the end", "MiB", true, 0},
      {"peak_rss_mib", "peak RSS (VmHWM)", "MiB", true, 5},
      {"minor_faults", "minor page faults", "", true, 0},
      {"malloc_p50_ns", "malloc p50", "ns", true, 0},
      {"malloc_p99_ns", "malloc p99", "ns", true, 0},
      {"malloc_p999_ns", "malloc p99.9", "ns", true, 0},
      {"free_p50_ns", "free p50", "ns", true, 0},
      {"free_p99_ns", "free p99", "ns", true, 0},
  };
  return m;
}

const Metric* find_metric(const std::string& name) {
  for (const Metric& m : all_metrics())
    if (m.name == name) return &m;
  return nullptr;
}

const std::vector<std::string>& default_metrics() {
  static const std::vector<std::string> d = {"wall_s",       "heap_peak_mib", "frag_at_live_peak",
                                             "peak_rss_mib", "malloc_p99_ns", "free_p99_ns"};
  return d;
}

std::string metric_names() {
  std::string names;
  for (const Metric& m : all_metrics()) names += (names.empty() ? "" : ", ") + m.name;
  return names;
}

std::string figure(double v) {
  if (std::isnan(v)) return "-";
  if (std::fabs(v) >= 1000) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

std::string figure(double v, const Metric& m) { return m.unit.empty() ? figure(v) : figure(v) + " " + m.unit; }

std::string p_value(double p) { return p < 0.001 ? fmt::format("{:.1e}", p) : fmt::format("{:.3f}", p); }

std::map<std::string, double> extract_metrics(const json& document) {
  std::map<std::string, double> m;
  const std::optional<replay::ReplayResult> read = replay::try_result_from_json(document);
  if (!read || !read->ran) return m;  // a run that did not replay, or a row this heaplab cannot read
  const replay::ReplayResult& r = *read;
  m["wall_s"] = r.wall_s;
  if (r.calls_per_s) m["mcalls_per_s"] = *r.calls_per_s / 1e6;
  if (r.cpu_user_s && r.cpu_system_s) m["cpu_s"] = *r.cpu_user_s + *r.cpu_system_s;
  if (r.minor_faults) m["minor_faults"] = *r.minor_faults;
  if (r.memory) {
    const replay::MemoryResult& mem = *r.memory;
    if (mem.heap_peak_kib) m["heap_peak_mib"] = *mem.heap_peak_kib / 1024;
    if (mem.heap_final_kib) m["heap_final_mib"] = *mem.heap_final_kib / 1024;
    if (mem.peak_rss_kib) m["peak_rss_mib"] = *mem.peak_rss_kib / 1024;
    // At the live peak only where the samples caught it (replay/README.md).
    if (r.live_peak_measured()) {
      if (mem.heap_kib_at_live_peak) m["heap_at_live_peak_mib"] = *mem.heap_kib_at_live_peak / 1024;
      if (mem.frag_at_live_peak) m["frag_at_live_peak"] = *mem.frag_at_live_peak;
      if (mem.frag_time_weighted) m["frag_time_weighted"] = *mem.frag_time_weighted;
    }
  }
  if (r.latency) {
    for (const char* op : {"malloc", "free"}) {
      const auto it = r.latency->ops.find(op);
      if (it == r.latency->ops.end()) continue;
      if (it->second.p50) m[std::string(op) + "_p50_ns"] = *it->second.p50;
      if (it->second.p99) m[std::string(op) + "_p99_ns"] = *it->second.p99;
      if (std::string(op) == "malloc" && it->second.p999) m["malloc_p999_ns"] = *it->second.p999;
    }
  }
  return m;
}

}  // namespace heaplab::experiments
