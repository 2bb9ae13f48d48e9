#include "experiments/metrics.h"

namespace heaplab::experiments {

using nlohmann::json;

const std::vector<Metric>& all_metrics() {
  static const std::vector<Metric> m = {
      {"wall_s", "wall time", "s", true},
      {"mcalls_per_s", "calls per second", "M/s", false},
      {"cpu_s", "CPU time", "s", true},
      {"heap_peak_mib", "heap peak", "MiB", true},
      {"heap_at_live_peak_mib", "heap at the live peak", "MiB", true},
      {"frag_at_live_peak", "fragmentation at the live peak", "", true},
      {"frag_time_weighted", "fragmentation, time-weighted", "", true},
      {"heap_final_mib", "heap at the end", "MiB", true},
      {"peak_rss_mib", "peak RSS (VmHWM)", "MiB", true},
      {"minor_faults", "minor page faults", "", true},
      {"malloc_p50_ns", "malloc p50", "ns", true},
      {"malloc_p99_ns", "malloc p99", "ns", true},
      {"malloc_p999_ns", "malloc p99.9", "ns", true},
      {"free_p50_ns", "free p50", "ns", true},
      {"free_p99_ns", "free p99", "ns", true},
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

namespace {

// result at a path of keys, if it is a number.
bool number_at(const json& j, std::initializer_list<const char*> path, double& out) {
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return false;
    p = &(*p)[k];
  }
  if (!p->is_number()) return false;
  out = p->get<double>();
  return true;
}

}  // namespace

std::map<std::string, double> extract_metrics(const json& r) {
  std::map<std::string, double> m;
  double v = 0, w = 0;
  if (number_at(r, {"replay", "wall_s"}, v)) m["wall_s"] = v;
  if (number_at(r, {"replay", "calls_per_s"}, v)) m["mcalls_per_s"] = v / 1e6;
  if (number_at(r, {"replay", "cpu", "user_s"}, v) && number_at(r, {"replay", "cpu", "system_s"}, w))
    m["cpu_s"] = v + w;
  if (number_at(r, {"replay", "page_faults", "minor"}, v)) m["minor_faults"] = v;
  const json empty = json::object();
  const json& mem = r.contains("replay") && r["replay"].contains("memory") ? r["replay"]["memory"] : empty;
  if (number_at(mem, {"heap_peak_kib"}, v)) m["heap_peak_mib"] = v / 1024;
  if (number_at(mem, {"heap_final_kib"}, v)) m["heap_final_mib"] = v / 1024;
  if (number_at(mem, {"peak_rss_kib"}, v)) m["peak_rss_mib"] = v / 1024;
  // At the live peak only where the samples caught it (replay/README.md).
  if (number_at(mem, {"live_peak_sampled_fraction"}, w) && w >= 0.5) {
    if (number_at(mem, {"heap_kib_at_live_peak"}, v)) m["heap_at_live_peak_mib"] = v / 1024;
    if (number_at(mem, {"fragmentation", "at_live_peak"}, v)) m["frag_at_live_peak"] = v;
    if (number_at(mem, {"fragmentation", "time_weighted"}, v)) m["frag_time_weighted"] = v;
  }
  for (const char* op : {"malloc", "free"}) {
    if (number_at(r, {"replay", "latency", "ops", op, "p50_ns"}, v)) m[std::string(op) + "_p50_ns"] = v;
    if (number_at(r, {"replay", "latency", "ops", op, "p99_ns"}, v)) m[std::string(op) + "_p99_ns"] = v;
  }
  if (number_at(r, {"replay", "latency", "ops", "malloc", "p99.9_ns"}, v)) m["malloc_p999_ns"] = v;
  return m;
}

}  // namespace heaplab::experiments
