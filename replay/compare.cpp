#include "replay/compare.h"

#include <fmt/format.h>

#include <algorithm>

namespace heaplab::replay {

namespace {

using nlohmann::json;

// `j` at a path of keys, or null.
const json* at(const json& j, std::initializer_list<const char*> path) {
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return nullptr;
    p = &(*p)[k];
  }
  return p;
}

double num(const json& j, std::initializer_list<const char*> path, double otherwise = -1) {
  const json* p = at(j, path);
  return p && p->is_number() ? p->get<double>() : otherwise;
}

std::string fixed(double v, int digits) { return v < 0 ? "-" : fmt::format("{:.{}f}", v, digits); }

std::string mib(double kib) { return kib < 0 ? "-" : fmt::format("{:.1f}", kib / 1024.0); }

}  // namespace

std::string comparison_table(const std::vector<json>& results) {
  bool latency = false;
  for (const json& r : results) latency = latency || at(r, {"replay", "latency"});
  struct Column {
    const char* head;
    bool left;
  };
  std::vector<Column> cols = {{"allocator", true},   {"wall s", false},     {"Mcalls/s", false},
                              {"heap peak", false},  {"at live pk", false}, {"frag pk", false},
                              {"frag avg", false},   {"heap end", false},   {"max RSS", false},
                              {"faults", false}};
  if (latency)
    for (const char* h : {"malloc p50", "malloc p99", "free p50", "free p99"}) cols.push_back({h, false});
  cols.push_back({"faithful", true});

  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> failures;
  for (const json& r : results) {
    const json* a = at(r, {"allocator"});
    std::string name = a ? a->value("name", std::string("?")) + "/" + a->value("load", std::string("?")) : "?";
    const json* p = at(r, {"replay"});
    if (!p || !at(r, {"replay", "wall_s"})) {
      const bool skipped = r.contains("skipped");
      std::string why = r.value(skipped ? "skipped" : "error", std::string("no result"));
      if (why.empty()) why = "no result";
      failures.push_back((skipped ? "skipped: " : "failed: ") + name + ": " + why);
      std::vector<std::string> row(cols.size(), "-");
      row[0] = name;
      row.back() = skipped ? "skipped" : "FAILED";
      rows.push_back(row);
      continue;
    }
    const json& m = p->contains("memory") ? (*p)["memory"] : json::object();
    const bool frag_ok = num(m, {"live_peak_sampled_fraction"}, 0) >= 0.5;
    std::vector<std::string> row = {
        name,
        fixed(num(*p, {"wall_s"}), 3),
        fixed(num(*p, {"calls_per_s"}) < 0 ? -1 : num(*p, {"calls_per_s"}) / 1e6, 2),
        mib(num(m, {"heap_peak_kib"})),
        frag_ok ? mib(num(m, {"heap_kib_at_live_peak"})) : "-",
        frag_ok ? fixed(num(m, {"fragmentation", "at_live_peak"}), 2) : "-",
        frag_ok ? fixed(num(m, {"fragmentation", "time_weighted"}), 2) : "-",
        mib(num(m, {"heap_final_kib"})),
        mib(num(m, {"peak_rss_kib"}, num(*p, {"max_rss_kib"}))),
        fixed(num(*p, {"page_faults", "minor"}), 0)};
    if (latency)
      for (const char* op : {"malloc", "free"})
        for (const char* q : {"p50_ns", "p99_ns"}) {
          // Below the timer's resolution a call reads as 0: say "<res".
          const double v = num(*p, {"latency", "ops", op, q}), res = num(*p, {"latency", "timer_resolution_ns"}, 0);
          row.push_back(v >= 0 && v < res ? fmt::format("<{:.0f}", res) : fixed(v, 0));
        }
    row.push_back(p->value("faithful", false) ? "yes" : p->value("calls_match", false) ? "calls only" : "NO");
    rows.push_back(row);
  }

  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) {
    width[c] = std::string(cols[c].head).size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  std::string s;
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c) l += "  ";
      l += cols[c].left ? fmt::format("{:<{}}", cells[c], width[c]) : fmt::format("{:>{}}", cells[c], width[c]);
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    s += l + "\n";
  };
  std::vector<std::string> heads;
  for (const Column& c : cols) heads.push_back(c.head);
  line(heads);
  for (const auto& row : rows) line(row);
  s += "heap: anonymous RSS less the replayer's own bookkeeping, MiB (peak, at the live-bytes peak, at the end);\n"
       "frag: heap RSS / live requested bytes at the live peak (pk) and time-weighted (avg); max RSS: VmHWM, MiB;\n"
       "faults: minor page faults during the replay";
  s += latency ? "; p50/p99: ns per call, timer cost subtracted (<N: below the timer's resolution)\n" : "\n";
  for (const std::string& f : failures) s += f + "\n";
  return s;
}

}  // namespace heaplab::replay
