#include "analysis/trace_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "common/text.h"

namespace heaplab::analysis {

namespace {

// Counts and bytes stay integers (exact beyond 2^53); the duration is the
// one figure in seconds.
struct Row {
  std::string section, name;
  uint64_t a = 0, b = 0;
  bool seconds = false;
  double sa = 0, sb = 0;
};

std::vector<Row> rows(const TraceStats& a, const TraceStats& b) {
  std::vector<Row> r;
  const auto add = [&](const std::string& sec, const std::string& name, uint64_t x, uint64_t y) {
    r.push_back({sec, name, x, y, false, 0, 0});
  };
  add("totals", "events", a.events, b.events);
  add("totals", "threads", a.threads, b.threads);
  if (a.has_time && b.has_time)
    r.push_back({"totals", "duration (s)", 0, 0, true, double(a.last_time - a.first_time) / 1e9,
                 double(b.last_time - b.first_time) / 1e9});
  for (unsigned k = 0; k < trace::kOpCount; ++k)
    if (a.ops[k] || b.ops[k]) add("calls", std::string(trace::kOpInfo[k].name), a.ops[k], b.ops[k]);
  add("objects", "created", a.objects_created, b.objects_created);
  add("objects", "freed", a.objects_freed, b.objects_freed);
  add("objects", "freed by another thread", a.objects_freed_by_other_thread, b.objects_freed_by_other_thread);
  add("objects", "live at end", a.live_objects_end, b.live_objects_end);
  add("bytes", "requested", a.bytes_requested, b.bytes_requested);
  add("bytes", "live peak", a.live_bytes.value, b.live_bytes.value);
  add("bytes", "live objects peak", a.live_objects.value, b.live_objects.value);
  add("bytes", "live at end", a.live_bytes_end, b.live_bytes_end);
  for (size_t k = 0; k < a.live_curve.size(); ++k)
    add("live bytes by progress", fmt::format("{}% of events", 5 * k), a.live_curve[k], b.live_curve[k]);
  for (unsigned k = 0; k < a.sizes.buckets.size(); ++k)
    if (a.sizes.buckets[k] || b.sizes.buckets[k])
      add("request sizes (bytes)", Log2Histogram::label(k), a.sizes.buckets[k], b.sizes.buckets[k]);
  for (unsigned k = 0; k < a.lifetime_events.buckets.size(); ++k)
    if (a.lifetime_events.buckets[k] || b.lifetime_events.buckets[k])
      add("lifetimes (events)", Log2Histogram::label(k), a.lifetime_events.buckets[k], b.lifetime_events.buckets[k]);
  return r;
}

// A count; UINT64_MAX is a sum that saturated.
std::string num(uint64_t v) { return v == UINT64_MAX ? "saturated" : common::group_digits(v); }

std::string delta(uint64_t a, uint64_t b) {
  if (a == UINT64_MAX || b == UINT64_MAX) return "-";
  return a == b ? "0" : b > a ? "+" + common::group_digits(b - a) : "-" + common::group_digits(a - b);
}

// misleading 0.00x); "-" when A is 0, as in the other diffs.
std::string ratio(double a, double b) {
  if (a == 0) return "-";
  const double r = b / a;
  return r != 0 && r < 0.01 ? fmt::format("{:.2g}x", r) : fmt::format("{:.2f}x", r);
}

}  // namespace

std::string trace_diff(const TraceStats& a, const TraceStats& b, const DiffNames& names, const std::string& format) {
  const std::vector<Row> r = rows(a, b);
  if (format == "json") {
    nlohmann::json j = {{"a", names.a}, {"b", names.b}, {"rows", nlohmann::json::array()}};
    for (const Row& x : r) {
      const double da = x.seconds ? x.sa : double(x.a), db = x.seconds ? x.sb : double(x.b);
      nlohmann::json row = {{"section", x.section}, {"name", x.name}};
      if (x.seconds) {
        row["a"] = x.sa;
        row["b"] = x.sb;
        row["delta"] = x.sb - x.sa;
      } else {
        row["a"] = x.a;
        row["b"] = x.b;
        // The difference as a signed integer where it fits, else as a number.
        if (x.a != UINT64_MAX && x.b != UINT64_MAX && (x.b >= x.a ? x.b - x.a : x.a - x.b) <= uint64_t(INT64_MAX))
          row["delta"] = x.b >= x.a ? int64_t(x.b - x.a) : -int64_t(x.a - x.b);
        else
          row["delta"] = nullptr;
        row["saturated"] = x.a == UINT64_MAX || x.b == UINT64_MAX;
      }
      row["ratio"] = da == 0 ? nlohmann::json(nullptr) : nlohmann::json(db / da);
      j["rows"].push_back(row);
    }
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
      // The section's name heads its first column; its rows are indented under it.
      for (auto& t : table) t[0] = "  " + t[0];
      table.insert(table.begin(), {section, "A", "B", "B - A", "B / A"});
      s += "\n" + common::align_columns(table, "lrrrr");
    }
    table.clear();
  };
  for (const Row& x : r) {
    if (x.section != section) {
      flush();
      section = x.section;
    }
    if (x.seconds)
      table.push_back({x.name, fmt::format("{:.6g}", x.sa), fmt::format("{:.6g}", x.sb),
                       fmt::format("{:+.6g}", x.sb - x.sa), ratio(x.sa, x.sb)});
    else
      table.push_back({x.name, num(x.a), num(x.b), delta(x.a, x.b),
                       x.a == UINT64_MAX || x.b == UINT64_MAX ? "-" : ratio(double(x.a), double(x.b))});
  }
  flush();
  return s;
}

}  // namespace heaplab::analysis
