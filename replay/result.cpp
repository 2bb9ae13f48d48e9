#include "replay/result.h"

#include <fmt/format.h>

#include <string>

#include "common/text.h"

namespace heaplab::replay {
namespace {

using nlohmann::json;

const json* at(const json& j, std::initializer_list<const char*> path) {
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return nullptr;
    p = &(*p)[k];
  }
  return p;
}

std::optional<double> number(const json& j, std::initializer_list<const char*> path) {
  const json* p = at(j, path);
  if (p && p->is_number()) return p->get<double>();
  return std::nullopt;
}

template <class T>
T value(const json& j, std::initializer_list<const char*> path, T otherwise) {
  const json* p = at(j, path);
  if (!p) return otherwise;
  if constexpr (std::is_same_v<T, std::string>) {
    return p->is_string() ? p->get<std::string>() : otherwise;
  } else if constexpr (std::is_same_v<T, bool>) {
    return p->is_boolean() ? p->get<bool>() : otherwise;
  } else {
    return p->is_number() ? p->get<T>() : otherwise;
  }
}

template <class T>
std::vector<T> column(const json& j, const char* key) {
  std::vector<T> v;
  const json* p = at(j, {key});
  if (!p || !p->is_array()) return v;
  v.reserve(p->size());
  for (const json& x : *p) v.push_back(x.is_number() ? x.get<T>() : T{});
  return v;
}

MemoryResult memory_of(const json& m) {
  MemoryResult r;
  r.heap_peak_kib = number(m, {"heap_peak_kib"});
  r.heap_final_kib = number(m, {"heap_final_kib"});
  r.peak_rss_kib = number(m, {"peak_rss_kib"});
  r.heap_kib_at_live_peak = number(m, {"heap_kib_at_live_peak"});
  r.live_bytes_peak_sampled = value<int64_t>(m, {"live_bytes_peak_sampled"}, 0);
  r.live_peak_sampled_fraction = value<double>(m, {"live_peak_sampled_fraction"}, 0.0);
  r.at_live_peak_source = value<std::string>(m, {"at_live_peak_source"}, "");
  r.frag_at_live_peak = number(m, {"fragmentation", "at_live_peak"});
  r.frag_time_weighted = number(m, {"fragmentation", "time_weighted"});
  r.frag_final = number(m, {"fragmentation", "final"});
  r.samples = value<uint64_t>(m, {"samples"}, 0);
  r.interval_ms = value<double>(m, {"interval_ms"}, 0.0);
  if (const json* tl = at(m, {"timeline"})) {
    r.timeline.t_ms = column<double>(*tl, "t_ms");
    r.timeline.heap_kib = column<double>(*tl, "heap_kib");
    r.timeline.rss_kib = column<double>(*tl, "rss_kib");
    r.timeline.live_bytes = column<int64_t>(*tl, "live_bytes");
  }
  if (const json* f = at(m, {"footprint"})) {
    r.has_footprint = true;
    const auto pages = [&](const char* k) -> std::optional<int64_t> {
      if (const json* p = at(*f, {k, "pages"}); p && p->is_number()) return p->get<int64_t>();
      return std::nullopt;
    };
    r.pages_at_live_peak = pages("at_live_peak");
    r.pages_at_live_high = pages("at_live_high");
    r.pages_at_end = pages("at_end");
    if (value<std::string>(*f, {"touched", "method"}, "none") != "none") r.pages_touched = pages("touched");
    r.touched_why = value<std::string>(*f, {"touched", "why"}, "");
  }
  return r;
}

LatencyResult latency_of(const json& l) {
  LatencyResult r;
  r.sample_every = value<uint32_t>(l, {"sample_every"}, 0);
  r.timer_overhead_ns = value<double>(l, {"timer_overhead_ns"}, 0.0);
  r.timer_resolution_ns = value<double>(l, {"timer_resolution_ns"}, 0.0);
  if (const json* ops = at(l, {"ops"}); ops && ops->is_object())
    for (const auto& [name, o] : ops->items()) {
      OpLatency q;
      q.samples = value<uint64_t>(o, {"samples"}, 0);
      q.p50 = number(o, {"p50_ns"});
      q.p90 = number(o, {"p90_ns"});
      q.p99 = number(o, {"p99_ns"});
      q.p999 = number(o, {"p99.9_ns"});
      q.p9999 = number(o, {"p99.99_ns"});
      q.max = number(o, {"max_ns"});
      r.ops[name] = q;
    }
  return r;
}

}  // namespace

std::string ReplayResult::label() const {
  return (allocator.empty() ? "?" : allocator) + "/" + (load.empty() ? "?" : load);
}

std::string ReplayResult::unfaithful() const {
  if (!ran || faithful) return "";
  if (!calls_match) return "calls DIFFER from the trace";
  if (results_match) return "not faithful";  // (a result of a heaplab that gave no counts)
  uint64_t nulls = 0, unexpected = 0;
  for (const auto& [name, o] : ops) {
    nulls += o.null_results;
    unexpected += o.unexpected_results;
  }
  return fmt::format(
      "results differ from the trace: {} NULL where it had a result, {} results where it had NULL, {} failed "
      "reallocs that moved here",
      common::group_digits(nulls), common::group_digits(unexpected), common::group_digits(moved_failed_reallocs));
}

ReplayResult result_from_json(const json& j) {
  if (!j.is_object()) throw ResultError("a replay result is a JSON object, not " + std::string(j.type_name()));
  const int version = value<int>(j, {"format_version"}, kResultFormatVersion);
  if (version > kResultFormatVersion)
    throw ResultError("replay result format_version " + std::to_string(version) +
                      " is newer than this heaplab reads (" + std::to_string(kResultFormatVersion) + ")");
  ReplayResult r;
  r.document = j;
  r.trace_path = value<std::string>(j, {"trace", "path"}, "");
  r.trace_id = value<std::string>(j, {"trace", "id"}, "");
  r.trace_calls = value<uint64_t>(j, {"trace", "calls"}, 0);
  r.live_bytes_peak = value<uint64_t>(j, {"trace", "live_bytes_peak"}, 0);
  r.recorded_threads = value<uint32_t>(j, {"trace", "recorded_threads"}, 0);
  r.replay_threads = value<uint32_t>(j, {"replay_threads"}, 0);
  if (const json* w = at(j, {"warnings"}); w && w->is_array())
    for (const json& s : *w)
      if (s.is_string()) r.warnings.push_back(s.get<std::string>());
  r.allocator = value<std::string>(j, {"allocator", "name"}, "");
  r.load = value<std::string>(j, {"allocator", "load"}, "");
  r.library = value<std::string>(j, {"allocator", "library"}, "");
  r.version = value<std::string>(j, {"allocator", "version"}, "");
  r.build_id = value<std::string>(j, {"allocator", "build_id"}, "");
  r.host = value<std::string>(j, {"replay", "environment", "host"}, "");
  r.cpu_model = value<std::string>(j, {"replay", "environment", "cpu_model"}, "");
  r.kernel = value<std::string>(j, {"replay", "environment", "kernel"}, "");
  r.exit_status = value<std::string>(j, {"exit", "status"}, "");
  r.skipped = value<std::string>(j, {"skipped"}, "");
  if (const json* e = at(j, {"error"})) r.error = e->is_string() ? e->get<std::string>() : e->dump();

  const json* p = at(j, {"replay"});
  if (!p || !p->is_object() || !at(*p, {"wall_s"})) return r;
  r.ran = true;
  r.wall_s = value<double>(*p, {"wall_s"}, 0.0);
  r.calls_per_s = number(*p, {"calls_per_s"});
  r.cpu_user_s = number(*p, {"cpu", "user_s"});
  r.cpu_system_s = number(*p, {"cpu", "system_s"});
  r.max_rss_kib = number(*p, {"max_rss_kib"});
  r.minor_faults = number(*p, {"page_faults", "minor"});
  r.major_faults = number(*p, {"page_faults", "major"});
  r.calls_match = value<bool>(*p, {"calls_match"}, false);
  r.results_match = value<bool>(*p, {"results_match"}, true);
  r.faithful = value<bool>(*p, {"faithful"}, false);
  if (const json* ops = at(*p, {"ops"}); ops && ops->is_object())
    for (const auto& [name, o] : ops->items())
      r.ops[name] = {value<uint64_t>(o, {"calls"}, 0), value<uint64_t>(o, {"expected"}, 0),
                     value<uint64_t>(o, {"null_results"}, 0), value<uint64_t>(o, {"unexpected_results"}, 0)};
  r.cross_thread_waits = value<uint64_t>(*p, {"cross_thread_waits", "count"}, 0);
  r.cross_thread_wait_ns = value<uint64_t>(*p, {"cross_thread_waits", "total_ns"}, 0);
  r.moved_failed_reallocs = value<uint64_t>(*p, {"moved_failed_reallocs"}, 0);
  r.bookkeeping_plan_bytes = value<uint64_t>(*p, {"bookkeeping_bytes", "plan"}, 0);
  r.bookkeeping_table_bytes = value<uint64_t>(*p, {"bookkeeping_bytes", "object_table"}, 0);
  if (const json* m = at(*p, {"memory"}); m && m->is_object()) r.memory = memory_of(*m);
  if (const json* l = at(*p, {"latency"}); l && l->is_object()) r.latency = latency_of(*l);
  return r;
}

std::optional<ReplayResult> try_result_from_json(const json& j) noexcept {
  try {
    return result_from_json(j);
  } catch (...) {
    return std::nullopt;
  }
}

json to_json(const ReplayResult& r) { return r.document; }

}  // namespace heaplab::replay
