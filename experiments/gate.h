// `heaplab gate`: a CI job's verdict on a session of replays against a
// baseline session (or one allocator against another), per metric with an
// explicit budget: the worsening allowed, as a percentage of the
// baseline's median or in the metric's unit.
//
// A check, per trace, allocator and budgeted metric, compares the medians
// of the measured runs (warm-ups left out):
//   pass         within the budget (or better)
//   regression   worse by more than the budget and the difference is
//                significant (two-sided Mann-Whitney U at alpha), or the
//                samples are too small for any test to be (then the budget
//                alone judges, and the message says so)
//   noise        worse by more than the budget but not significant
//   failed       some of the session's runs failed or were not faithful
//   missing      the baseline has the cell (or the metric) and the session
//                has no measured run of it
//   new          only the session has the cell: reported, not judged
// The gate fails on any regression, failed or missing check. Fed plain run
// records, so that every output format is golden-tested.
#pragma once

#include <string>
#include <vector>

#include "experiments/history.h"
#include "experiments/report.h"

namespace heaplab::experiments {

struct Budget {
  std::string metric;
  double limit = 0;     // the worsening allowed (>= 0): a percentage or in the metric's unit
  bool percent = true;  // limit is a percentage of the baseline's median
  std::string text;     // as given, e.g. "+3%"
};

// "heap_peak_mib=+3%", "malloc_p99_ns=10%", "heap_peak_mib=+0.5" (MiB):
// the sign, where given, must point the metric's worse way (+ for a metric
// where lower is better, - for calls per second). Throws
// std::invalid_argument naming what is wrong.
Budget parse_budget(const std::string& spec);

// The budgets used when none is given: every default metric at its
// Metric::default_budget_pct the worse way (peak RSS +5%, heap peak +10%,
// wall time and fragmentation +15%; the latency percentiles not judged).
std::vector<Budget> default_budgets();

struct GateOptions {
  std::vector<Budget> budgets;  // empty: default_budgets()
  double alpha = 0.05;
  bool significance = true;  // false: the budget alone judges
  // Compare this allocator of the session against `baseline_allocator` of
  // the baseline (both empty: every allocator against its namesake).
  std::string allocator, baseline_allocator;
};

struct GateCheck {
  std::string trace, allocator, metric;
  std::string baseline_allocator;  // the allocator it is compared with
  std::string state;               // pass | regression | noise | failed | missing | new
  size_t n = 0, baseline_n = 0;    // measured runs
  double median = 0, baseline_median = 0;
  double change = 0;     // median / baseline median - 1 (NaN when the baseline median is 0)
  double p = 1;          // Mann-Whitney U, two-sided
  bool testable = true;  // the samples are large enough to be significant at alpha
  std::string budget;    // as given
  std::string message;   // one line for people
  bool fails() const { return state == "regression" || state == "failed" || state == "missing"; }
};

struct GateResult {
  std::vector<GateCheck> checks;
  size_t failures = 0;  // checks that fail the gate
  bool passed() const { return failures == 0; }
};

// Throws std::invalid_argument for an unknown metric, an allocator not in
// its session, or nothing to compare.
GateResult gate(const std::vector<RunRecord>& baseline, const std::vector<RunRecord>& session, const GateOptions& opt);

// The smallest two-sided p-value the exact Mann-Whitney test can give for
// samples of m and n: 2 / C(m + n, m).
double smallest_p(size_t m, size_t n);

struct GateReportInfo {
  std::string session, baseline;  // ids, for the heading
  std::string timestamp;          // UTC ISO-8601, for JUnit
  std::string hostname;           // for JUnit
};

// For people: a heading, one line per check (failures first), a verdict.
std::string gate_text(const GateResult& r, const GateOptions& opt, const GateReportInfo& info);
// The steps (history_steps, experiments/history.h) in the history of the
// session's experiment, `sessions` long, for people: shown below the
// checks, never failing the gate (a step long past is not the change
// being gated; the newest session is judged by the checks above).
std::string history_text(const std::vector<Step>& steps, const std::string& experiment, size_t sessions);

// JUnit XML: a test suite per trace, a test case per allocator and metric
// (a regression is a <failure>, a failed or missing run an <error>, a new
// cell <skipped>).
std::string gate_junit(const GateResult& r, const GateOptions& opt, const GateReportInfo& info);

}  // namespace heaplab::experiments
