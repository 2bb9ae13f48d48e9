#include "analysis/trace_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "common/text.h"

namespace heaplab::analysis {

namespace {

struct Row {
  std::string section, name;
  double a = 0, b = 0;
};

std::string bucket(unsigned k) {
  if (k == 0) return "0";
  const uint64_t lo = uint64_t{1} << (k - 1);
  return k == 64 ? common::group_digits(lo) + ".."
                 : common::group_digits(lo) + ".." + common::group_digits((uint64_t{1} << k) - 1);
}

std::vector<Row> rows(const TraceStats& a, const TraceStats& b) {
  std::vector<Row> r;
  const auto add = [&](const std::string& sec, const std::string& name, double x, double y) {
    r.push_back({sec, name, x, y});
  };
  add("totals", "events", double(a.events), double(b.events));
  add("totals", "threads", a.threads, b.threads);
  if (a.has_time && b.has_time)
    add("totals", "duration (s)", double(a.last_time - a.first_time) / 1e9, double(b.last_time - b.first_time) / 1e9);
  for (unsigned k = 0; k < trace::kOpCount; ++k)
    if (a.ops[k] || b.ops[k]) add("calls", std::string(trace::kOpInfo[k].name), double(a.ops[k]), double(b.ops[k]));
  add("objects", "created", double(a.objects_created), double(b.objects_created));
  add("objects", "freed", double(a.objects_freed), double(b.objects_freed));
  add("objects", "freed by another thread", double(a.objects_freed_by_other_thread),
      double(b.objects_freed_by_other_thread));
  add("objects", "live at end", double(a.live_objects_end), double(b.live_objects_end));
  add("bytes", "requested", double(a.bytes_requested), double(b.bytes_requested));
  add("bytes", "live peak", double(a.live_bytes.value), double(b.live_bytes.value));
  add("bytes", "live objects peak", double(a.live_objects.value), double(b.live_objects.value));
  add("bytes", "live at end", double(a.live_bytes_end), double(b.live_bytes_end));
  for (size_t k = 0; k < a.live_curve.size(); ++k)
    add("live bytes by progress", fmt::format("{}% of events", 5 * k), double(a.live_curve[k]),
        double(b.live_curve[k]));
  for (unsigned k = 0; k < a.sizes.buckets.size(); ++k)
    if (a.sizes.buckets[k] || b.sizes.buckets[k])
      add("request sizes (bytes)", bucket(k), double(a.sizes.buckets[k]), double(b.sizes.buckets[k]));
  for (unsigned k = 0; k < a.lifetime_events.buckets.size(); ++k)
    if (a.lifetime_events.buckets[k] || b.lifetime_events.buckets[k])
      add("lifetimes (events)", bucket(k), double(a.lifetime_events.buckets[k]), double(b.lifetime_events.buckets[k]));
  return r;
}

std::string num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e18)
    return common::group_digits(uint64_t(std::fabs(v))).insert(0, v < 0 ? "-" : "");
  return fmt::format("{:.6g}", v);
}

std::string delta(double a, double b) {
  const double d = b - a;
  return d == 0 ? "0" : (d > 0 ? "+" : "-") + num(std::fabs(d));
}

std::string ratio(double a, double b) { return a == 0 ? (b == 0 ? "1.00x" : "-") : fmt::format("{:.2f}x", b / a); }

}  // namespace

std::string trace_diff(const TraceStats& a, const TraceStats& b, const DiffNames& names, const std::string& format) {
  const std::vector<Row> r = rows(a, b);
  if (format == "json") {
    nlohmann::json j = {{"a", names.a}, {"b", names.b}, {"rows", nlohmann::json::array()}};
    for (const Row& x : r)
      j["rows"].push_back({{"section", x.section},
                           {"name", x.name},
                           {"a", x.a},
                           {"b", x.b},
                           {"delta", x.b - x.a},
                           {"ratio", x.a == 0 ? nlohmann::json(nullptr) : nlohmann::json(x.b / x.a)}});
    return j.dump(2) + "\n";
  }
  if (format != "text" && format != "md")
    throw std::invalid_argument("--format: expected text, md or json, not '" + format + "'");
  const bool md = format == "md";
  std::string s = md ? fmt::format("# heaplab diff\n\nA: `{}`  \nB: `{}`\n", names.a, names.b)
                     : fmt::format("heaplab diff: A {}\n              B {}\n", names.a, names.b);
  std::string section;
  std::vector<std::vector<std::string>> table;
  const auto flush = [&] {
    if (table.empty()) return;
    if (md) {
      s += "\n## " + section + "\n\n| | A | B | B - A | B / A |\n|---|---:|---:|---:|---:|\n";
      for (const auto& t : table) s += fmt::format("| {} | {} | {} | {} | {} |\n", t[0], t[1], t[2], t[3], t[4]);
    } else {
      const char* heads[5] = {"", "A", "B", "B - A", "B / A"};
      std::vector<size_t> w(5, 0);
      w[0] = section.size();
      for (size_t i = 1; i < 5; ++i) w[i] = std::string_view(heads[i]).size();
      for (const auto& t : table) {
        w[0] = std::max(w[0], 2 + t[0].size());
        for (size_t i = 1; i < 5; ++i) w[i] = std::max(w[i], t[i].size());
      }
      s += fmt::format("\n{:<{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}\n", section, w[0], heads[1], w[1], heads[2], w[2],
                       heads[3], w[3], heads[4], w[4]);
      for (const auto& t : table)
        s += fmt::format("{:<{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}\n", "  " + t[0], w[0], t[1], w[1], t[2], w[2], t[3],
                         w[3], t[4], w[4]);
    }
    table.clear();
  };
  for (const Row& x : r) {
    if (x.section != section) {
      flush();
      section = x.section;
    }
    table.push_back({x.name, num(x.a), num(x.b), delta(x.a, x.b), ratio(x.a, x.b)});
  }
  flush();
  return s;
}

}  // namespace heaplab::analysis
