#include "experiments/diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <stdexcept>

#include "common/text.h"
#include "experiments/metrics.h"
#include "experiments/stats.h"
#include "replay/result.h"

namespace heaplab::experiments {

namespace {

struct Row {
  std::string trace, allocator, metric;
  size_t na = 0, nb = 0;
  double a = 0, b = 0, p = 1;
  bool significant = false;
  std::string verdict;  // better | worse | same
};

}  // namespace

std::string session_diff(const std::vector<RunRecord>& a, const std::vector<RunRecord>& b,
                         const SessionDiffOptions& opt) {
  if (opt.format != "text" && opt.format != "md" && opt.format != "json")
    throw std::invalid_argument("--format: expected text, md or json, not '" + opt.format + "'");
  if (!(opt.alpha > 0 && opt.alpha < 1))
    throw std::invalid_argument(fmt::format("--alpha {}: a significance level between 0 and 1", opt.alpha));
  // Cells (trace, allocator) both have, in A's order.
  std::vector<std::pair<std::string, std::string>> cells;
  for (const RunRecord& r : a) {
    const std::pair<std::string, std::string> c{r.trace, r.allocator};
    if (std::find(cells.begin(), cells.end(), c) != cells.end()) continue;
    if (std::any_of(b.begin(), b.end(),
                    [&](const RunRecord& x) { return x.trace == c.first && x.allocator == c.second; }))
      cells.push_back(c);
  }
  if (cells.empty()) throw std::invalid_argument("the two sessions have no trace and allocator in common");
  std::vector<Row> rows;
  for (const auto& cell_names : cells)
    for (const Metric& m : all_metrics()) {
      // (Not a structured binding: clang 14 cannot capture one in the lambda below.)
      const std::string& t = cell_names.first;
      const std::string& al = cell_names.second;
      const auto samples = [&](const std::vector<RunRecord>& runs) {
        std::vector<double> v;
        for (const RunRecord& r : runs)
          if (!r.warmup && r.ok && r.trace == t && r.allocator == al)
            if (auto it = r.metrics.find(m.name); it != r.metrics.end()) v.push_back(it->second);
        return v;
      };
      const std::vector<double> sa = samples(a), sb = samples(b);
      if (sa.empty() || sb.empty()) continue;
      Row r;
      r.trace = t;
      r.allocator = al;
      r.metric = m.name;
      r.na = sa.size();
      r.nb = sb.size();
      r.a = median(sa);
      r.b = median(sb);
      r.p = mann_whitney(sb, sa).p;
      r.significant = r.p < opt.alpha;
      r.verdict = !r.significant || r.a == r.b ? "same" : ((r.b < r.a) == m.lower_is_better ? "better" : "worse");
      rows.push_back(r);
    }
  if (opt.format == "json") {
    nlohmann::json j = {{"a", opt.a}, {"b", opt.b}, {"alpha", opt.alpha}, {"rows", nlohmann::json::array()}};
    for (const Row& r : rows)
      j["rows"].push_back({{"trace", r.trace},
                           {"allocator", r.allocator},
                           {"metric", r.metric},
                           {"n_a", r.na},
                           {"n_b", r.nb},
                           {"median_a", r.a},
                           {"median_b", r.b},
                           {"ratio", r.a == 0 ? nlohmann::json(nullptr) : nlohmann::json(r.b / r.a)},
                           {"p_value", r.p},
                           {"significant", r.significant},
                           {"verdict", r.verdict}});
    return j.dump(2) + "\n";
  }
  const bool md = opt.format == "md";
  std::string s = md ? fmt::format(
                           "# heaplab diff\n\nA: session `{}`  \nB: session `{}`  \nmedians; B / A; "
                           "better or worse where Mann-Whitney U says they differ (p < {})\n",
                           opt.a, opt.b, opt.alpha)
                     : fmt::format(
                           "heaplab diff: A session {}, B session {}\nmedians; B / A; better or worse where "
                           "Mann-Whitney U says they differ (p < {})\n",
                           opt.a, opt.b, opt.alpha);
  std::string cell;
  std::vector<std::vector<std::string>> table;
  const auto flush = [&] {
    if (table.empty()) return;
    if (md) {
      s += "\n## " + cell + "\n\n| metric | A | B | B / A | p | |\n|---|---:|---:|---:|---:|---|\n";
      for (const auto& t : table)
        s += fmt::format("| {} | {} | {} | {} | {} | {} |\n", t[0], t[1], t[2], t[3], t[4], t[5]);
    } else {
      table.insert(table.begin(), {"metric", "A", "B", "B / A", "p", ""});
      s += "\n" + cell + "\n" + common::align_columns(table, "lrrrrl", "  ");
    }
    table.clear();
  };
  for (const Row& r : rows) {
    const std::string c = r.trace + " / " + r.allocator;
    if (c != cell) {
      flush();
      cell = c;
    }
    const Metric& m = *find_metric(r.metric);
    table.push_back({r.metric, figure(r.a, m), figure(r.b, m), r.a == 0 ? "-" : fmt::format("{:.2f}x", r.b / r.a),
                     p_value(r.p), r.verdict == "same" ? "" : r.verdict});
  }
  flush();
  return s;
}

std::string result_diff(const nlohmann::json& a, const nlohmann::json& b, const SessionDiffOptions& opt) {
  if (opt.format != "text" && opt.format != "md" && opt.format != "json")
    throw std::invalid_argument("--format: expected text, md or json, not '" + opt.format + "'");
  // Both replays must have run and replayed every call as recorded: a
  // crashed or unfaithful replay's figures are not the allocator's.
  std::string trace_a, trace_b;
  for (const auto* side : {&a, &b}) {
    const std::string& path = side == &a ? opt.a : opt.b;
    if (side->is_array())
      throw std::invalid_argument(path + ": holds " + std::to_string(side->size()) +
                                  " replays (--allocator all); diff takes one replay's result (heaplab replay -o)");
    const std::optional<replay::ReplayResult> r = replay::try_result_from_json(*side);
    if (!r || !r->ran) throw std::invalid_argument(path + ": not the result of a replay that ran (heaplab replay -o)");
    if (r->exit_status != "ok" || !r->faithful)
      throw std::invalid_argument(
          path + ": a replay that " +
          (r->exit_status != "ok" ? "ended " + r->exit_status : std::string("was not faithful")) +
          ": its figures are not the allocator's");
    (side == &a ? trace_a : trace_b) = r->trace_id;
  }
  const std::map<std::string, double> ma = extract_metrics(a), mb = extract_metrics(b);
  const auto name = [](const nlohmann::json& r) {
    const nlohmann::json& al = r.contains("allocator") ? r["allocator"] : nlohmann::json::object();
    return al.is_object() && al.contains("name") && al["name"].is_string() ? al["name"].get<std::string>() : "?";
  };
  std::vector<std::vector<std::string>> table;
  nlohmann::json rows = nlohmann::json::array();
  for (const Metric& m : all_metrics()) {
    const auto ia = ma.find(m.name), ib = mb.find(m.name);
    if (ia == ma.end() || ib == mb.end()) continue;
    const double x = ia->second, y = ib->second;
    const std::string verdict = x == y ? "same" : ((y < x) == m.lower_is_better ? "better" : "worse");
    table.push_back({m.name, figure(x, m), figure(y, m), x == 0 ? "-" : fmt::format("{:.2f}x", y / x),
                     verdict == "same" ? "" : verdict});
    rows.push_back({{"metric", m.name},
                    {"a", x},
                    {"b", y},
                    {"ratio", x == 0 ? nlohmann::json(nullptr) : nlohmann::json(y / x)},
                    {"verdict", verdict}});
  }
  if (opt.format == "json")
    return nlohmann::json{{"a", opt.a},
                          {"b", opt.b},
                          {"allocator_a", name(a)},
                          {"allocator_b", name(b)},
                          {"same_trace", trace_a == trace_b},
                          {"rows", rows}}
               .dump(2) +
           "\n";
  const std::string other_trace =
      trace_a != trace_b ? fmt::format("note: the two replays are of different traces ({} and {})\n", trace_a, trace_b)
                         : std::string();
  std::string s;
  if (opt.format == "md") {
    s = fmt::format(
        "# heaplab diff\n\nA: `{}` ({})  \nB: `{}` ({})  \none replay each: no significance\n\n"
        "| metric | A | B | B / A | |\n|---|---:|---:|---:|---|\n",
        opt.a, name(a), opt.b, name(b));
    for (const auto& t : table) s += fmt::format("| {} | {} | {} | {} | {} |\n", t[0], t[1], t[2], t[3], t[4]);
    return s + (other_trace.empty() ? "" : "\n" + other_trace);
  }
  s = fmt::format("heaplab diff: A {} ({}), B {} ({}); one replay each: no significance\n", opt.a, name(a), opt.b,
                  name(b)) +
      other_trace;
  table.insert(table.begin(), {"metric", "A", "B", "B / A", ""});
  s += common::align_columns(table, "lrrrl", "  ");
  return s;
}

}  // namespace heaplab::experiments
