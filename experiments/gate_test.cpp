// `heaplab gate` on made-up sessions: planted regressions and
// non-regressions judged as they must be, budgets parsed and refused, and
// the exact text of both output formats.
#include "experiments/gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace heaplab::experiments {
namespace {

// Five runs of two allocators on one trace; `peak` and `p99` scale the
// session's figures, `wall` shifts its wall times.
std::vector<RunRecord> session(double peak = 1, double p99 = 1, double wall = 0, int reps = 5) {
  std::vector<RunRecord> v;
  const double walls[] = {1.00, 1.03, 0.97, 1.02, 0.98, 1.01, 0.99};
  for (int i = 0; i < reps; ++i) {
    for (const char* a : {"glibc", "mine"}) {
      RunRecord r;
      r.trace = "app";
      r.allocator = a;
      r.rep = i;
      r.metrics = {{"wall_s", walls[i] + wall},
                   {"heap_peak_mib", 100 * peak},
                   {"malloc_p99_ns", (200 + i) * p99},
                   {"mcalls_per_s", 10 / (walls[i] + wall)}};
      v.push_back(r);
    }
  }
  RunRecord warm = v[0];  // a warm-up far off, never judged
  warm.warmup = true;
  warm.metrics["heap_peak_mib"] = 1e6;
  v.push_back(warm);
  return v;
}

std::vector<Budget> budgets(std::initializer_list<const char*> specs) {
  std::vector<Budget> b;
  for (const char* s : specs) b.push_back(parse_budget(s));
  return b;
}

const GateCheck& find(const GateResult& r, const std::string& alloc, const std::string& metric) {
  for (const GateCheck& c : r.checks)
    if (c.allocator == alloc && c.metric == metric) return c;
  throw std::runtime_error("no check " + alloc + " " + metric);
}

TEST(Gate, BudgetsAreParsed) {
  Budget b = parse_budget("heap_peak_mib=+3%");
  EXPECT_EQ(b.metric, "heap_peak_mib");
  EXPECT_DOUBLE_EQ(b.limit, 3);
  EXPECT_TRUE(b.percent);
  EXPECT_EQ(b.text, "+3%");
  b = parse_budget("malloc_p99_ns=10%");
  EXPECT_EQ(b.text, "+10%");
  b = parse_budget("heap_peak_mib=0.5");
  EXPECT_FALSE(b.percent);
  EXPECT_EQ(b.text, "+0.5");
  b = parse_budget("mcalls_per_s=-5%");  // higher is better: worse is down
  EXPECT_EQ(b.text, "-5%");
  EXPECT_EQ(parse_budget("mcalls_per_s=5%").text, "-5%");
  // The defaults sit above what each metric moves between sessions of one
  // build (scripts/bench-gate-noise.py); the p99s, which moved by up to
  // 254%, are judged only with a budget.
  std::vector<std::string> defaults;
  for (const Budget& d : default_budgets()) defaults.push_back(d.metric + "=" + d.text);
  EXPECT_EQ(defaults, (std::vector<std::string>{"wall_s=+15%", "heap_peak_mib=+10%", "frag_at_live_peak=+15%",
                                                "peak_rss_mib=+5%"}));
}

TEST(Gate, BadBudgetsAreRefused) {
  const auto error = [](const std::string& spec) {
    try {
      parse_budget(spec);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("heap_peak_mib"),
            "--budget 'heap_peak_mib': expected METRIC=+N% or METRIC=+N (e.g. heap_peak_mib=+3%)");
  EXPECT_EQ(error("heap_peek=+3%").rfind("--budget 'heap_peek=+3%': unknown metric 'heap_peek' (known: wall_s, ", 0),
            0u);
  EXPECT_EQ(error("heap_peak_mib=-3%"),
            "--budget 'heap_peak_mib=-3%': heap_peak_mib is worse when it grows, so its budget is +3% (or unsigned)");
  EXPECT_EQ(error("mcalls_per_s=+3%"),
            "--budget 'mcalls_per_s=+3%': mcalls_per_s is worse when it shrinks, so its budget is -3% (or unsigned)");
  for (const char* bad : {"heap_peak_mib=", "heap_peak_mib=%", "heap_peak_mib=three%", "heap_peak_mib=+-3%",
                          "heap_peak_mib=3%%", "heap_peak_mib=inf", "heap_peak_mib=nan%", "heap_peak_mib=0x10%",
                          "heap_peak_mib= 5", "heap_peak_mib=1e3%", "heap_peak_mib=1.2.3", "heap_peak_mib=."})
    EXPECT_NE(error(bad).find("is not a worsening allowed"), std::string::npos) << bad;
}

TEST(Gate, BadAlphaAndABrokenBaseline) {
  GateOptions o;
  o.budgets = budgets({"heap_peak_mib=+3%"});
  for (double alpha : {0.0, 1.0, std::nan("")}) {
    o.alpha = alpha;
    EXPECT_THROW(gate(session(), session(), o), std::invalid_argument) << alpha;
  }
  o.alpha = 0.05;
  // Every baseline run of a cell failed: nothing to judge against, and the gate fails.
  std::vector<RunRecord> base = session();
  for (RunRecord& r : base)
    if (r.allocator == "mine") r.ok = false;
  const GateResult r = gate(base, session(), o);
  EXPECT_EQ(find(r, "mine", "heap_peak_mib").state, "missing");
  EXPECT_EQ(find(r, "mine", "heap_peak_mib").message, "the baseline's 5 run(s) all failed: nothing to judge against");
  EXPECT_FALSE(r.passed());
}

TEST(Gate, JUnitTextIsValidUtf8) {
  GateOptions o;
  o.budgets = budgets({"heap_peak_mib=+3%"});
  GateReportInfo i;
  i.session = "s\xff\xc3\xa9\xed\xa0\x80<&>";  // a bad byte, é, a surrogate, markup
  i.baseline = "b";
  const std::string x = gate_junit(gate(session(), session(), o), o, i);
  EXPECT_NE(x.find("<property name=\"session\" "
                   "value=\"s\xEF\xBF\xBD\xc3\xa9\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD&lt;&amp;&gt;\"/>"),
            std::string::npos)
      << x;
}

TEST(Gate, SmallestP) {
  EXPECT_DOUBLE_EQ(smallest_p(3, 3), 0.1);       // 2 / 20: never significant at 0.05
  EXPECT_DOUBLE_EQ(smallest_p(4, 4), 2.0 / 70);  // can be
  EXPECT_DOUBLE_EQ(smallest_p(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(smallest_p(0, 5), 1.0);
  EXPECT_LT(smallest_p(200, 200), 1e-100);
}

TEST(Gate, IdenticalSessionsPass) {
  GateOptions o;
  const GateResult r = gate(session(), session(), o);
  EXPECT_TRUE(r.passed());
  // Two allocators, the default budgets of what was measured (not
  // frag_at_live_peak, peak_rss_mib, free_p99_ns; malloc_p99_ns is, but has
  // no default budget).
  ASSERT_EQ(r.checks.size(), 2u * 2);
  for (const GateCheck& c : r.checks) EXPECT_EQ(c.state, "pass") << c.metric;
  // A budget given for what neither measured is a mistake.
  o.budgets = budgets({"free_p99_ns=+5%"});
  try {
    gate(session(), session(), o);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "no run of either session measured free_p99_ns (a budget of it judges nothing)");
  }
}

TEST(Gate, PlantedRegressionsFailAndSmallChangesPass) {
  GateOptions o;
  o.budgets = budgets({"heap_peak_mib=+3%", "malloc_p99_ns=+10%", "wall_s=+5%"});
  // Heap +4%: beyond +3%, and 5 runs against 5 of a constant figure are
  // significant. p99 +8%: within +10%.
  GateResult r = gate(session(), session(1.04, 1.08), o);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.failures, 2u);  // heap peak, for both allocators
  EXPECT_EQ(find(r, "mine", "heap_peak_mib").state, "regression");
  EXPECT_NEAR(find(r, "mine", "heap_peak_mib").change, 0.04, 1e-12);
  EXPECT_LT(find(r, "mine", "heap_peak_mib").p, 0.05);
  EXPECT_EQ(find(r, "mine", "malloc_p99_ns").state, "pass");
  EXPECT_EQ(find(r, "mine", "wall_s").state, "pass");
  // Improvements never fail.
  r = gate(session(), session(0.5, 0.5, -0.5), o);
  EXPECT_TRUE(r.passed());
  // +2% heap: within.
  EXPECT_TRUE(gate(session(), session(1.02), o).passed());
}

TEST(Gate, NoiseBeyondTheBudgetIsNotARegression) {
  // Wall times that overlap: the session's median is 6% slower but the
  // samples interleave, so Mann-Whitney cannot tell them apart.
  std::vector<RunRecord> base = session(), mine = session();
  const double b[] = {1.00, 1.20, 0.90, 1.25, 0.85}, m[] = {1.06, 1.22, 0.88, 1.30, 0.86};
  size_t i = 0, j = 0;
  for (RunRecord& r : base)
    if (!r.warmup && r.allocator == "mine") r.metrics["wall_s"] = b[i++];
  for (RunRecord& r : mine)
    if (!r.warmup && r.allocator == "mine") r.metrics["wall_s"] = m[j++];
  GateOptions o;
  o.budgets = budgets({"wall_s=+5%"});
  GateResult r = gate(base, mine, o);
  EXPECT_EQ(find(r, "mine", "wall_s").state, "noise");
  EXPECT_GT(find(r, "mine", "wall_s").p, 0.05);
  EXPECT_TRUE(r.passed());
  // Without significance, the budget alone judges.
  o.significance = false;
  EXPECT_EQ(find(gate(base, mine, o), "mine", "wall_s").state, "regression");
}

TEST(Gate, TooFewRunsAreJudgedByTheBudgetAlone) {
  GateOptions o;
  o.budgets = budgets({"heap_peak_mib=+3%"});
  const GateResult r = gate(session(1, 1, 0, 2), session(1.10, 1, 0, 2), o);
  const GateCheck& c = find(r, "mine", "heap_peak_mib");
  EXPECT_EQ(c.state, "regression");
  EXPECT_FALSE(c.testable);
  EXPECT_EQ(c.message,
            "100 MiB -> 110 MiB (+10.0%, budget +3%); 2 and 2 run(s) cannot be significant at 0.05: the budget alone "
            "judges");
  // 3 against 3 constant figures: the exact test could not reach 0.05, but
  // with ties it is the normal approximation, which does (p = 0.047).
  const GateResult r3 = gate(session(1, 1, 0, 3), session(1.10, 1, 0, 3), o);
  const GateCheck& t = find(r3, "mine", "heap_peak_mib");
  EXPECT_EQ(t.state, "regression");
  EXPECT_TRUE(t.testable);
  EXPECT_EQ(t.message, "100 MiB -> 110 MiB (+10.0%, budget +3%), p = 0.047");
}

TEST(Gate, FailedMissingAndNewCells) {
  GateOptions o;
  o.budgets = budgets({"heap_peak_mib=+3%"});
  std::vector<RunRecord> base = session(), mine;
  for (RunRecord r : session()) {
    if (r.allocator == "glibc") continue;  // glibc missing from the session
    if (r.rep == 2) r.ok = false;          // one run of mine failed
    mine.push_back(r);
    if (!r.warmup) {
      r.allocator = "tcmalloc";  // a new allocator, not in the baseline
      r.ok = true;
      mine.push_back(r);
    }
  }
  const GateResult r = gate(base, mine, o);
  EXPECT_EQ(find(r, "mine", "heap_peak_mib").state, "failed");
  EXPECT_EQ(find(r, "mine", "heap_peak_mib").message, "1 of 5 run(s) failed or were not faithful");
  EXPECT_EQ(find(r, "glibc", "heap_peak_mib").state, "missing");
  EXPECT_EQ(find(r, "glibc", "heap_peak_mib").message, "no run in the session (the baseline has 5)");
  EXPECT_EQ(find(r, "tcmalloc", "heap_peak_mib").state, "new");
  EXPECT_EQ(r.failures, 2u);
}

TEST(Gate, OneAllocatorAgainstAnother) {
  // One session, "mine" against "glibc": mine's heap 10% bigger.
  std::vector<RunRecord> runs = session();
  for (RunRecord& r : runs)
    if (r.allocator == "mine") r.metrics["heap_peak_mib"] = 110;
  GateOptions o;
  o.budgets = budgets({"heap_peak_mib=+3%", "mcalls_per_s=-5%"});
  o.allocator = "mine";
  o.baseline_allocator = "glibc";
  const GateResult r = gate(runs, runs, o);
  ASSERT_EQ(r.checks.size(), 2u);
  EXPECT_EQ(r.checks[0].state, "regression");
  EXPECT_EQ(r.checks[0].baseline_allocator, "glibc");
  EXPECT_EQ(r.checks[1].state, "pass");
  o.allocator = "nope";
  EXPECT_THROW(
      {
        try {
          gate(runs, runs, o);
        } catch (const std::invalid_argument& e) {
          EXPECT_STREQ(e.what(), "allocator 'nope' is not in the session (it has glibc, mine)");
          throw;
        }
      },
      std::invalid_argument);
}

TEST(Gate, HigherIsBetterMetricsRegressDownwards) {
  GateOptions o;
  o.budgets = budgets({"mcalls_per_s=-5%"});
  // Wall times 20% longer: calls per second about 17% lower.
  const GateResult r = gate(session(), session(1, 1, 0.2), o);
  EXPECT_EQ(find(r, "mine", "mcalls_per_s").state, "regression");
  EXPECT_LT(find(r, "mine", "mcalls_per_s").change, -0.15);
}

TEST(Gate, StepsInTheHistory) {
  // Ten sessions: mine's heap peak 100 MiB in the first four, 120 after.
  std::vector<std::string> ids;
  std::vector<std::vector<RunRecord>> sessions;
  for (int i = 0; i < 10; ++i) {
    ids.push_back("s" + std::to_string(i));
    sessions.push_back(session());
    for (RunRecord& r : sessions.back())
      if (r.allocator == "mine" && i >= 4) r.metrics["heap_peak_mib"] = 120 + (i % 3) * 0.5;
  }
  const std::vector<Step> steps = history_steps(ids, sessions, {"heap_peak_mib", "wall_s"});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].session, "s4");
  EXPECT_EQ(steps[0].allocator, "mine");
  EXPECT_TRUE(steps[0].regression);
  EXPECT_EQ(history_text(steps, "nightly", 10),
            "history of experiment nightly (10 sessions): 1 step(s)\n"
            "  regression   app  mine  heap_peak_mib  +20.5%: 100 MiB -> 120 MiB from session s4 (p = 0.005)\n");
  EXPECT_EQ(history_text({}, "nightly", 10),
            "history of experiment nightly (10 sessions): no step (change points: E-divisive means, p <= 0.01)\n");
  EXPECT_EQ(history_text({}, "nightly", 3),
            "history of experiment nightly: 3 complete session(s), too few to find steps (8 needed)\n");
  EXPECT_TRUE(history_steps(ids, sessions, {"heap_peak_mib"}, "glibc").empty());
}

GateReportInfo info() {
  GateReportInfo i;
  i.session = "s2";
  i.baseline = "s1";
  i.timestamp = "2026-11-25T06:00:00Z";
  i.hostname = "ci-host";
  return i;
}

// Without budgets, the latency percentiles are not judged, and the budgets
// line says so.
TEST(Gate, DefaultBudgetsSayWhatIsNotJudged) {
  GateOptions o;
  const GateResult r = gate(session(), session(), o);
  const std::string text = gate_text(r, o, info());
  EXPECT_NE(text.find("budgets: wall_s +15%, heap_peak_mib +10%, frag_at_live_peak +15%, peak_rss_mib +5% (not "
                      "malloc_p99_ns, free_p99_ns: they move too much between sessions to judge without a --budget); "
                      "a regression must be significant"),
            std::string::npos)
      << text;
  for (const GateCheck& c : r.checks) EXPECT_NE(c.metric, "malloc_p99_ns");
}

TEST(Gate, TextGolden) {
  GateOptions o;
  o.budgets = budgets({"heap_peak_mib=+3%", "malloc_p99_ns=+10%"});
  const GateResult r = gate(session(), session(1.04, 1.05), o);
  EXPECT_EQ(gate_text(r, o, info()),
            "heaplab gate: session s2 against baseline s1\n"
            "budgets: heap_peak_mib +3%, malloc_p99_ns +10%; a regression must be significant (Mann-Whitney U, p < "
            "0.05)\n"
            "      state       trace  allocator  metric         baseline  session  change  budget      p  note\n"
            "FAIL  regression  app    glibc      heap_peak_mib   100 MiB  104 MiB   +4.0%     +3%  0.004\n"
            "FAIL  regression  app    mine       heap_peak_mib   100 MiB  104 MiB   +4.0%     +3%  0.004\n"
            "ok    pass        app    glibc      malloc_p99_ns    202 ns   212 ns   +5.0%    +10%  0.008\n"
            "ok    pass        app    mine       malloc_p99_ns    202 ns   212 ns   +5.0%    +10%  0.008\n"
            "gate: FAILED (4 check(s): 2 regression, 2 pass)\n");
}

TEST(Gate, JUnitGolden) {
  GateOptions o;
  o.budgets = budgets({"heap_peak_mib=+3%"});
  std::vector<RunRecord> mine = session(1.04);
  for (RunRecord& r : mine)
    if (r.allocator == "glibc") r.ok = false;
  const GateResult r = gate(session(), mine, o);
  EXPECT_EQ(gate_junit(r, o, info()),
            R"(<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="heaplab gate" tests="2" failures="1" errors="1" time="0">
  <testsuite name="app" package="heaplab.gate" id="0" timestamp="2026-11-25T06:00:00" hostname="ci-host" tests="2" failures="1" errors="1" skipped="0" time="0">
    <properties>
      <property name="session" value="s2"/>
      <property name="baseline" value="s1"/>
      <property name="budgets" value="heap_peak_mib +3%"/>
      <property name="alpha" value="0.05"/>
      <property name="significance" value="required"/>
      <property name="timezone" value="UTC"/>
    </properties>
    <testcase name="heap_peak_mib" classname="app.glibc" time="0">
      <error message="5 of 5 run(s) failed or were not faithful" type="failed">app glibc heap_peak_mib: 5 of 5 run(s) failed or were not faithful</error>
    </testcase>
    <testcase name="heap_peak_mib" classname="app.mine" time="0">
      <failure message="100 MiB -&gt; 104 MiB (+4.0%, budget +3%), p = 0.004" type="regression">app mine heap_peak_mib: 100 MiB -&gt; 104 MiB (+4.0%, budget +3%), p = 0.004</failure>
    </testcase>
    <system-out></system-out>
    <system-err></system-err>
  </testsuite>
</testsuites>
)");
}

}  // namespace
}  // namespace heaplab::experiments
