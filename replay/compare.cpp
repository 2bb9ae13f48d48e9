#include "replay/compare.h"

#include <fmt/format.h>

#include <algorithm>

#include "allocators/library.h"
#include "replay/result.h"

namespace heaplab::replay {

namespace {

using nlohmann::json;

std::string fixed(double v, int digits) { return v < 0 ? "-" : fmt::format("{:.{}f}", v, digits); }

std::string mib(double kib) { return kib < 0 ? "-" : fmt::format("{:.1f}", kib / 1024.0); }

}  // namespace

std::string comparison_table(const std::vector<json>& documents) {
  std::vector<ReplayResult> results;
  results.reserve(documents.size());
  for (const json& d : documents) results.push_back(result_from_json(d));
  bool latency = false;
  for (const ReplayResult& r : results) latency = latency || r.latency.has_value();
  struct Column {
    const char* head;
    bool left;
  };
  std::vector<Column> cols = {{"allocator", true},   {"wall s", false},  {"Mcalls/s", false}, {"heap peak", false},
                              {"at live pk", false}, {"frag pk", false}, {"frag avg", false}, {"heap end", false},
                              {"max RSS", false},    {"faults", false}};
  if (latency)
    for (const char* h : {"malloc p50", "malloc p99", "free p50", "free p99"}) cols.push_back({h, false});
  cols.push_back({"faithful", true});

  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> failures;
  for (const ReplayResult& r : results) {
    const std::string name = r.document.contains("allocator") ? r.label() : "?";
    if (!r.ran) {
      const bool skipped = r.document.contains("skipped");
      std::string why = skipped ? r.skipped : r.error;
      if (why.empty()) why = "no result";
      failures.push_back((skipped ? "skipped: " : "failed: ") + name + ": " + why);
      std::vector<std::string> row(cols.size(), "-");
      row[0] = name;
      row.back() = skipped ? "skipped" : "FAILED";
      rows.push_back(row);
      continue;
    }
    const MemoryResult m = r.memory.value_or(MemoryResult{});
    const bool frag_ok = r.live_peak_measured();
    std::vector<std::string> row = {name,
                                    fixed(r.wall_s, 3),
                                    fixed(r.calls_per_s && *r.calls_per_s >= 0 ? *r.calls_per_s / 1e6 : -1, 2),
                                    mib(m.heap_peak_kib.value_or(-1)),
                                    frag_ok ? mib(m.heap_kib_at_live_peak.value_or(-1)) : "-",
                                    frag_ok ? fixed(m.frag_at_live_peak.value_or(-1), 2) : "-",
                                    frag_ok ? fixed(m.frag_time_weighted.value_or(-1), 2) : "-",
                                    mib(m.heap_final_kib.value_or(-1)),
                                    mib(m.peak_rss_kib.value_or(r.max_rss_kib.value_or(-1))),
                                    fixed(r.minor_faults.value_or(-1), 0)};
    if (latency)
      for (const char* op : {"malloc", "free"})
        for (const bool p99 : {false, true}) {
          // Below the timer's resolution a call reads as 0: say "<res".
          double v = -1;
          const double res = r.latency ? r.latency->timer_resolution_ns : 0;
          if (r.latency && r.latency->ops.count(op)) {
            const OpLatency& q = r.latency->ops.at(op);
            v = (p99 ? q.p99 : q.p50).value_or(-1);
          }
          row.push_back(v >= 0 && v < res ? fmt::format("<{:.0f}", res) : fixed(v, 0));
        }
    row.push_back(r.faithful ? "yes" : r.calls_match ? "calls only" : "NO");
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
  heads.reserve(cols.size());
  for (const Column& c : cols) heads.push_back(c.head);
  line(heads);
  for (const auto& row : rows) line(row);
  s += "heap: anonymous RSS less the replayer's own bookkeeping, MiB (peak, at the live-bytes peak, at the end);\n"
       "frag: heap RSS / live requested bytes at the live peak (pk) and time-weighted (avg); max RSS: VmHWM, MiB;\n"
       "faults: minor page faults during the replay";
  s += latency ? "; p50/p99: ns per call, timer cost subtracted (<N: below the timer's resolution)\n" : "\n";
  for (const std::string& f : failures) s += f + "\n";
  // The replays' warnings (of those that failed too), each once: with the
  // names of the replays that gave it, unless every replay not skipped did.
  std::vector<std::pair<std::string, std::vector<std::string>>> warnings;  // text, names (in order)
  size_t ran = 0;
  for (const ReplayResult& r : results) {
    if (r.document.contains("skipped")) continue;
    ++ran;
    const auto w = r.document.find("warnings");
    if (w == r.document.end() || !w->is_array()) continue;
    for (const json& text : *w) {
      if (!text.is_string()) continue;
      auto it = std::find_if(warnings.begin(), warnings.end(), [&](const auto& e) { return e.first == text; });
      if (it == warnings.end()) it = warnings.insert(warnings.end(), {text.get<std::string>(), {}});
      const std::string name = r.label();
      if (std::find(it->second.begin(), it->second.end(), name) == it->second.end()) it->second.push_back(name);
    }
  }
  for (const auto& [text, names] : warnings) {
    std::string who;
    if (names.size() != ran)
      for (const std::string& n : names) who += (who.empty() ? "" : ", ") + n;
    s += "warning: " + (who.empty() ? "" : who + ": ") + text + "\n";
  }
  return s;
}

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> v;
  size_t from = 0;
  for (;;) {
    const size_t comma = s.find(',', from);
    v.push_back(s.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) return v;
    from = comma + 1;
  }
}

}  // namespace

std::vector<std::string> allocator_list(const std::string& spec) {
  std::vector<std::string> names;
  if (spec == "all") {
    for (const auto& k : allocators::known_allocators()) names.push_back(k.name);
    return names;
  }
  names = split_commas(spec);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) throw ReplayError("--allocator: an empty name in '" + spec + "'");
    if (std::find(names.begin(), names.begin() + ptrdiff_t(i), names[i]) != names.begin() + ptrdiff_t(i))
      throw ReplayError("--allocator: '" + names[i] + "' named twice in '" + spec + "'");
  }
  return names;
}

std::vector<std::string> load_list(const std::string& spec) {
  std::vector<std::string> loads = spec == "both" ? std::vector<std::string>{"preload", "direct"} : split_commas(spec);
  for (const std::string& l : loads)
    if (l != "preload" && l != "direct") throw ReplayError("--load: expected preload, direct or both, not '" + l + "'");
  return loads;
}

Comparison replay_each(const ReplayOptions& base, const std::vector<std::string>& allocs,
                       const std::vector<std::string>& loads, bool all, const ComparisonObserver& observe) {
  // Names given by hand that cannot run (with the load modes asked for)
  // stop everything before anything runs.
  if (!all)
    for (const std::string& alloc : allocs) {
      std::string err;
      if (!allocators::resolve_allocator(alloc, err)) throw ReplayError(err);
    }
  if (!all)
    for (const std::string& alloc : allocs)
      for (const std::string& load : loads) {
        ReplayOptions opt = base;
        opt.allocator = alloc;
        opt.load = load;
        try {
          check_launchable(opt);
        } catch (const ReplayError& e) {
          throw ReplayError(alloc + " (" + load + "): " + e.what());
        }
      }
  Comparison c;
  // A replay asked for that could not start: its row, a failure (exit 2).
  const auto could_not_start = [&](const std::string& alloc, const std::string& load, const std::string& why) {
    c.results.push_back({{"allocator", {{"name", alloc}, {"load", load}}},
                         {"exit", {{"status", "error"}, {"code", 2}}},
                         {"error", why}});
    if (observe.failed) observe.failed(alloc, load, why);
    c.worst_exit = std::max(c.worst_exit, 2);
  };
  for (const std::string& alloc : allocs) {
    for (const std::string& load : loads) {
      ReplayOptions opt = base;
      opt.allocator = alloc;
      opt.load = load;
      ReplayOutcome o;
      try {
        check_launchable(opt);  // (one not on this machine is skipped, never "replaying on" first)
        if (observe.starting) observe.starting(alloc, load);
        o = run_replay(opt);
      } catch (const NotAvailable& e) {
        if (!all) throw ReplayError(alloc + " (" + load + "): " + e.what());
        c.results.push_back({{"allocator", {{"name", alloc}, {"load", load}}}, {"skipped", e.what()}});
        continue;
      } catch (const TraceRefused& e) {
        // The same for every allocator: said once, before any has run (one
        // that ran before it, the machine having changed since, keeps its
        // row, and this one is a failure).
        if (c.results.empty() || std::all_of(c.results.begin(), c.results.end(),
                                             [](const nlohmann::json& j) { return j.contains("skipped"); }))
          throw ReplayError(e.what());
        could_not_start(alloc, load, e.what());
        continue;
      } catch (const ReplayError& e) {
        // Asked for and could not start (a bad trace, a setting it cannot
        // take): a failure, never "skipped".
        if (!all) throw ReplayError(alloc + " (" + load + "): " + e.what());
        could_not_start(alloc, load, e.what());
        continue;
      }
      if (o.exit_code != 0) {
        o.result["error"] = o.error;
        if (observe.failed) observe.failed(alloc, load, o.error);
      }
      c.worst_exit = std::max(c.worst_exit, o.exit_code);
      c.results.push_back(std::move(o.result));
    }
  }
  return c;
}

}  // namespace heaplab::replay
