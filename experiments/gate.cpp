#include "experiments/gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "experiments/changepoint.h"
#include "experiments/metrics.h"
#include "experiments/stats.h"

#include "common/text.h"

namespace heaplab::experiments {

namespace {

template <class T>
void add_unique(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

std::string change_text(const GateCheck& c) {
  if (std::isnan(c.change)) return c.median == c.baseline_median ? "+0%" : "from 0";
  return fmt::format("{:+.1f}%", 100 * c.change);
}

// The length of the valid UTF-8 sequence at s[i] of a character XML 1.0
// allows (no surrogates, no U+FFFE/U+FFFF), or 0.
size_t utf8_char(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (b(i + k) & 0x3F);
  }
  static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF) return 0;
  return n;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    if (static_cast<unsigned char>(ch) >= 0x80) {
      // Text that is not UTF-8 (a session id of other bytes): U+FFFD for each bad byte.
      if (const size_t n = utf8_char(s, i)) {
        o.append(s, i, n);
        i += n - 1;
      } else {
        o += "\xEF\xBF\xBD";
      }
      continue;
    }
    switch (ch) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        // XML 1.0 has no control characters but tab, newline and return.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r')
          o += '?';
        else
          o += ch;
    }
  }
  return o;
}

std::string budgets_text(const GateOptions& opt) {
  const std::vector<Budget> budgets = opt.budgets.empty() ? default_budgets() : opt.budgets;
  std::string s;
  for (const Budget& b : budgets) s += (s.empty() ? "" : ", ") + b.metric + " " + b.text;
  if (opt.budgets.empty()) {
    std::string unjudged;
    for (const std::string& m : default_metrics())
      if (find_metric(m)->default_budget_pct == 0) unjudged += (unjudged.empty() ? "" : ", ") + m;
    if (!unjudged.empty())
      s += " (not " + unjudged + ": they move too much between sessions to judge without a --budget)";
  }
  return s;
}

}  // namespace

Budget parse_budget(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos)
    throw std::invalid_argument("--budget '" + spec + "': expected METRIC=+N% or METRIC=+N (e.g. heap_peak_mib=+3%)");
  Budget b;
  b.metric = spec.substr(0, eq);
  b.text = spec.substr(eq + 1);
  const Metric* m = find_metric(b.metric);
  if (!m)
    throw std::invalid_argument("--budget '" + spec + "': unknown metric '" + b.metric + "' (known: " + metric_names() +
                                ")");
  std::string v = b.text;
  char sign = 0;
  if (!v.empty() && (v[0] == '+' || v[0] == '-')) {
    sign = v[0];
    v.erase(0, 1);
  }
  if (!v.empty() && v.back() == '%') {
    v.pop_back();
  } else {
    b.percent = false;
  }
  // A plain decimal number: digits and at most one point (no sign, exponent, hex or blanks).
  const bool plain = !v.empty() && v != "." && std::count(v.begin(), v.end(), '.') <= 1 &&
                     std::all_of(v.begin(), v.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
  const double x = plain ? std::strtod(v.c_str(), nullptr) : NAN;
  if (!plain || !std::isfinite(x))
    throw std::invalid_argument("--budget '" + spec + "': '" + b.text +
                                "' is not a worsening allowed (a number, optionally signed, % for a percentage)");
  const char worse = m->lower_is_better ? '+' : '-';
  if (sign && sign != worse)
    throw std::invalid_argument(
        fmt::format("--budget '{}': {} is worse when it {}, so its budget is {}{} (or unsigned)", spec, b.metric,
                    m->lower_is_better ? "grows" : "shrinks", worse, v + (b.percent ? "%" : "")));
  b.limit = x;
  b.text = fmt::format("{}{}{}", worse, v, b.percent ? "%" : "");
  return b;
}

std::vector<Budget> default_budgets() {
  std::vector<Budget> v;
  for (const std::string& m : default_metrics())
    if (const Metric* d = find_metric(m); d->default_budget_pct > 0)
      v.push_back(parse_budget(fmt::format("{}={}{}%", m, d->lower_is_better ? '+' : '-', d->default_budget_pct)));
  return v;
}

double smallest_p(size_t m, size_t n) {
  if (m == 0 || n == 0) return 1;
  // C(m + n, m) as a double, growing factor by factor.
  double c = 1;
  const size_t k = std::min(m, n);
  for (size_t i = 1; i <= k; ++i) {
    c = c * double(m + n - k + i) / double(i);
    if (c > 1e300) return 0;
  }
  return std::min(1.0, 2 / c);
}

GateResult gate(const std::vector<RunRecord>& baseline, const std::vector<RunRecord>& session, const GateOptions& opt) {
  if (!(opt.alpha > 0 && opt.alpha < 1))
    throw std::invalid_argument(fmt::format("--alpha {}: a significance level between 0 and 1", opt.alpha));
  // A metric neither side measured (latency, in replays without it): a
  // default budget of it is dropped, one given is an error.
  const auto measured_anywhere = [&](const std::string& metric) {
    for (const auto* runs : {&baseline, &session})
      for (const RunRecord& r : *runs)
        if (!r.warmup && r.ok && r.metrics.count(metric)) return true;
    return false;
  };
  std::vector<Budget> budgets;
  for (const Budget& b : opt.budgets.empty() ? default_budgets() : opt.budgets) {
    if (!find_metric(b.metric))
      throw std::invalid_argument("unknown metric '" + b.metric + "' (known: " + metric_names() + ")");
    if (measured_anywhere(b.metric))
      budgets.push_back(b);
    else if (!opt.budgets.empty())
      throw std::invalid_argument("no run of either session measured " + b.metric + " (a budget of it judges nothing)");
  }

  std::vector<std::string> traces, session_allocators, baseline_allocators;
  for (const RunRecord& r : session) {
    add_unique(traces, r.trace);
    add_unique(session_allocators, r.allocator);
  }
  for (const RunRecord& r : baseline) {
    add_unique(traces, r.trace);
    add_unique(baseline_allocators, r.allocator);
  }
  const auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s.empty() ? std::string("none") : s;
  };
  // The pairs compared: (session allocator, baseline allocator).
  std::vector<std::pair<std::string, std::string>> pairs;
  if (!opt.allocator.empty() || !opt.baseline_allocator.empty()) {
    const std::string a = opt.allocator.empty() ? opt.baseline_allocator : opt.allocator;
    const std::string b = opt.baseline_allocator.empty() ? opt.allocator : opt.baseline_allocator;
    if (std::find(session_allocators.begin(), session_allocators.end(), a) == session_allocators.end())
      throw std::invalid_argument("allocator '" + a + "' is not in the session (it has " + list(session_allocators) +
                                  ")");
    if (std::find(baseline_allocators.begin(), baseline_allocators.end(), b) == baseline_allocators.end())
      throw std::invalid_argument("allocator '" + b + "' is not in the baseline (it has " + list(baseline_allocators) +
                                  ")");
    pairs.emplace_back(a, b);
  } else {
    std::vector<std::string> all = session_allocators;
    for (const std::string& b : baseline_allocators) add_unique(all, b);
    for (const std::string& a : all) pairs.emplace_back(a, a);
  }
  if (session.empty()) throw std::invalid_argument("the session has no runs");
  if (baseline.empty()) throw std::invalid_argument("the baseline has no runs");

  GateResult out;
  for (const std::string& t : traces) {
    for (const auto& [a, b] : pairs) {
      const auto measured = [&t](const std::vector<RunRecord>& runs, const std::string& alloc) {
        std::vector<const RunRecord*> v;
        for (const RunRecord& r : runs)
          if (!r.warmup && r.trace == t && r.allocator == alloc) v.push_back(&r);
        return v;
      };
      const std::vector<const RunRecord*> base_runs = measured(baseline, b), runs = measured(session, a);
      if (base_runs.empty() && runs.empty()) continue;
      size_t failed = 0;
      for (const RunRecord* r : runs) failed += !r->ok;
      for (const Budget& budget : budgets) {
        const Metric& m = *find_metric(budget.metric);
        const auto samples = [&m](const std::vector<const RunRecord*>& v) {
          std::vector<double> s;
          for (const RunRecord* r : v)
            if (r->ok)
              if (auto it = r->metrics.find(m.name); it != r->metrics.end()) s.push_back(it->second);
          return s;
        };
        const std::vector<double> base = samples(base_runs), mine = samples(runs);
        GateCheck c;
        c.trace = t;
        c.allocator = a;
        c.baseline_allocator = b;
        c.metric = m.name;
        c.budget = budget.text;
        c.n = mine.size();
        c.baseline_n = base.size();
        c.median = mine.empty() ? NAN : median(mine);
        c.baseline_median = base.empty() ? NAN : median(base);
        c.change = NAN;
        if (!mine.empty() && !base.empty() && c.baseline_median != 0) c.change = c.median / c.baseline_median - 1;
        if (base_runs.empty()) {
          c.state = "new";
          c.message = "not in the baseline: not judged";
        } else if (runs.empty()) {
          c.state = "missing";
          c.message = fmt::format("no run in the session (the baseline has {})", base_runs.size());
        } else if (failed) {
          c.state = "failed";
          c.message = fmt::format("{} of {} run(s) failed or were not faithful", failed, runs.size());
        } else if (base.empty() &&
                   std::none_of(base_runs.begin(), base_runs.end(), [](const RunRecord* r) { return r->ok; })) {
          c.state = "missing";
          c.message = fmt::format("the baseline's {} run(s) all failed: nothing to judge against", base_runs.size());
        } else if (base.empty()) {
          c.state = "new";
          c.message = "the baseline's runs did not measure it: not judged";
        } else if (mine.empty()) {
          c.state = "missing";
          c.message = fmt::format("not measured in the session (the baseline's {} run(s) measured it)", base.size());
        } else {
          const double delta = m.lower_is_better ? c.median - c.baseline_median : c.baseline_median - c.median;
          bool beyond = false;
          if (delta > 0) {
            if (!budget.percent)
              beyond = delta > budget.limit;
            else
              beyond = c.baseline_median == 0 || 100 * delta / std::fabs(c.baseline_median) > budget.limit;
          }
          c.p = mann_whitney(mine, base).p;
          // (With ties the test is the normal approximation, which can reach
          // alpha where the exact one could not: then it can be significant.)
          c.testable = smallest_p(mine.size(), base.size()) < opt.alpha || c.p < opt.alpha;
          const std::string figures = fmt::format("{} -> {} ({}, budget {})", figure(c.baseline_median, m),
                                                  figure(c.median, m), change_text(c), budget.text);
          if (!beyond) {
            c.state = "pass";
            c.message = figures;
          } else if (!opt.significance) {
            c.state = "regression";
            c.message = figures;
          } else if (!c.testable) {
            c.state = "regression";
            c.message = fmt::format("{}; {} and {} run(s) cannot be significant at {}: the budget alone judges",
                                    figures, mine.size(), base.size(), opt.alpha);
          } else {
            c.state = c.p < opt.alpha ? "regression" : "noise";
            c.message = fmt::format("{}, p = {}{}", figures, p_value(c.p),
                                    c.p < opt.alpha ? "" : fmt::format(": not significant at {}", opt.alpha));
          }
        }
        out.failures += c.fails();
        out.checks.push_back(std::move(c));
      }
    }
  }
  if (out.checks.empty()) throw std::invalid_argument("nothing to compare: no trace and allocator in either");
  return out;
}

std::string gate_text(const GateResult& r, const GateOptions& opt, const GateReportInfo& info) {
  std::string s = fmt::format("heaplab gate: session {} against baseline {}\n", info.session, info.baseline);
  s +=
      fmt::format("budgets: {}; {}\n", budgets_text(opt),
                  opt.significance ? fmt::format("a regression must be significant (Mann-Whitney U, p < {})", opt.alpha)
                                   : std::string("the budgets alone judge"));
  std::vector<std::vector<std::string>> rows = {
      {"", "state", "trace", "allocator", "metric", "baseline", "session", "change", "budget", "p", "note"}};
  std::vector<const GateCheck*> order;
  for (const GateCheck& c : r.checks)
    if (c.fails()) order.push_back(&c);
  for (const GateCheck& c : r.checks)
    if (!c.fails()) order.push_back(&c);
  for (const GateCheck* c : order) {
    const Metric& m = *find_metric(c->metric);
    const bool figures = c->n && c->baseline_n;
    std::string note;
    if (c->state == "regression" && !c->testable && opt.significance) note = "too few runs to test: budget alone";
    if (c->state == "noise") note = "beyond the budget, not significant";
    if (c->state == "failed" || c->state == "missing" || c->state == "new") note = c->message;
    rows.push_back(
        {c->fails() ? "FAIL" : "ok", c->state, c->trace,
         c->allocator == c->baseline_allocator ? c->allocator : c->allocator + " vs " + c->baseline_allocator,
         c->metric, c->baseline_n ? figure(c->baseline_median, m) : "-", c->n ? figure(c->median, m) : "-",
         figures ? change_text(*c) : "-", c->budget, figures && c->state != "failed" ? p_value(c->p) : "-", note});
  }
  s += common::align_columns(rows, "lllllrrrrrl");  // figures right-aligned, words left
  size_t counts[6] = {};
  const char* states[6] = {"regression", "failed", "missing", "noise", "new", "pass"};
  for (const GateCheck& c : r.checks)
    for (int i = 0; i < 6; ++i) counts[i] += c.state == states[i];
  std::string tally;
  for (int i = 0; i < 6; ++i)
    if (counts[i]) tally += fmt::format("{}{} {}", tally.empty() ? "" : ", ", counts[i], states[i]);
  s += fmt::format("gate: {} ({} check(s): {})\n", r.passed() ? "passed" : "FAILED", r.checks.size(), tally);
  return s;
}

std::string history_text(const std::vector<Step>& steps, const std::string& experiment, size_t sessions) {
  const ChangePointOptions cp;
  if (sessions < 2 * cp.min_size)
    return fmt::format("history of experiment {}: {} complete session(s), too few to find steps ({} needed)\n",
                       experiment, sessions, 2 * cp.min_size);
  std::string s = fmt::format("history of experiment {} ({} sessions): {}\n", experiment, sessions,
                              steps.empty() ? std::string("no step (change points: E-divisive means, p <= 0.01)")
                                            : fmt::format("{} step(s)", steps.size()));
  for (const Step& st : steps) {
    const Metric& m = *find_metric(st.metric);
    s += fmt::format("  {:<11}  {}  {}  {}  {:+.1f}%: {} -> {} from session {} (p = {})\n",
                     st.regression ? "regression" : "improvement", st.trace, st.allocator, st.metric, 100 * st.change,
                     figure(st.before, m), figure(st.after, m), st.session, p_value(st.p));
  }
  return s;
}

std::string gate_junit(const GateResult& r, const GateOptions& opt, const GateReportInfo& info) {
  std::vector<std::string> traces;
  for (const GateCheck& c : r.checks) add_unique(traces, c.trace);
  // JUnit's timestamp has no zone (the Ant schema's pattern): UTC, said in a property.
  std::string when = info.timestamp;
  if (!when.empty() && when.back() == 'Z') when.pop_back();
  const auto count = [&](const std::string& trace, auto pred) {
    size_t n = 0;
    for (const GateCheck& c : r.checks) n += (trace.empty() || c.trace == trace) && pred(c);
    return n;
  };
  const auto is_failure = [](const GateCheck& c) { return c.state == "regression"; };
  const auto is_error = [](const GateCheck& c) { return c.state == "failed" || c.state == "missing"; };
  const auto is_skipped = [](const GateCheck& c) { return c.state == "new"; };
  const auto any = [](const GateCheck&) { return true; };
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format("<testsuites name=\"heaplab gate\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"0\">\n",
                   r.checks.size(), count("", is_failure), count("", is_error));
  int id = 0;
  for (const std::string& t : traces) {
    x += fmt::format(
        "  <testsuite name=\"{}\" package=\"heaplab.gate\" id=\"{}\" timestamp=\"{}\" hostname=\"{}\" tests=\"{}\" "
        "failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"0\">\n",
        xml_escape(t), id++, xml_escape(when), xml_escape(info.hostname.empty() ? "localhost" : info.hostname),
        count(t, any), count(t, is_failure), count(t, is_error), count(t, is_skipped));
    x += "    <properties>\n";
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"session", info.session},
             {"baseline", info.baseline},
             {"budgets", budgets_text(opt)},
             {"alpha", fmt::format("{}", opt.alpha)},
             {"significance", opt.significance ? "required" : "not required"},
             {"timezone", "UTC"}})
      x += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", k, xml_escape(v));
    x += "    </properties>\n";
    for (const GateCheck& c : r.checks) {
      if (c.trace != t) continue;
      const std::string who =
          c.allocator == c.baseline_allocator ? c.allocator : c.allocator + " vs " + c.baseline_allocator;
      x += fmt::format("    <testcase name=\"{}\" classname=\"{}.{}\" time=\"0\"", xml_escape(c.metric),
                       xml_escape(c.trace), xml_escape(who));
      const std::string what = fmt::format("{} {} {}: {}", c.trace, who, c.metric, c.message);
      if (is_failure(c))
        x += fmt::format(">\n      <failure message=\"{}\" type=\"regression\">{}</failure>\n    </testcase>\n",
                         xml_escape(c.message), xml_escape(what));
      else if (is_error(c))
        x += fmt::format(">\n      <error message=\"{}\" type=\"{}\">{}</error>\n    </testcase>\n",
                         xml_escape(c.message), c.state, xml_escape(what));
      else if (is_skipped(c))
        x += fmt::format(">\n      <skipped message=\"{}\"/>\n    </testcase>\n", xml_escape(c.message));
      else
        x += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml_escape(what));
    }
    x += "    <system-out></system-out>\n    <system-err></system-err>\n  </testsuite>\n";
  }
  x += "</testsuites>\n";
  return x;
}

}  // namespace heaplab::experiments
