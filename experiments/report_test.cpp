// `heaplab report` on made-up runs: the summaries (medians, spread, ratio to
// the baseline, significance) and the exact text of every output format.
#include "experiments/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace heaplab::experiments {
namespace {

// Two allocators on one trace, 5 runs each: jemalloc clearly faster and
// clearly bigger; a warm-up run and a failed run that must not count.
std::vector<RunRecord> runs() {
  std::vector<RunRecord> v;
  const double glibc_wall[] = {1.00, 1.02, 0.98, 1.01, 0.99};
  const double je_wall[] = {0.50, 0.52, 0.49, 0.51, 0.53};
  for (int i = 0; i < 5; ++i) {
    v.push_back({"app", "glibc", i, false, true, {{"wall_s", glibc_wall[i]}, {"heap_peak_mib", 10.0}}});
    v.push_back({"app", "jemalloc", i, false, true, {{"wall_s", je_wall[i]}, {"heap_peak_mib", 12.0 + i * 0.1}}});
  }
  v.push_back({"app", "jemalloc", 0, true, true, {{"wall_s", 9.0}, {"heap_peak_mib", 99.0}}});    // warm-up
  v.push_back({"app", "jemalloc", 5, false, false, {{"wall_s", 9.0}, {"heap_peak_mib", 99.0}}});  // failed
  return v;
}

TEST(Report, Summaries) {
  ReportOptions o;
  const auto s = summarise(runs(), o);
  ASSERT_EQ(s.size(), 4u);  // wall_s and heap_peak_mib, for both
  EXPECT_EQ(s[0].metric, "wall_s");
  EXPECT_EQ(s[0].allocator, "glibc");
  EXPECT_EQ(s[0].n, 5u);
  EXPECT_DOUBLE_EQ(s[0].median, 1.00);
  EXPECT_DOUBLE_EQ(s[0].min, 0.98);
  EXPECT_DOUBLE_EQ(s[0].ratio, 1.0);
  EXPECT_FALSE(s[0].significant);
  EXPECT_EQ(s[1].allocator, "jemalloc");
  EXPECT_DOUBLE_EQ(s[1].median, 0.51);
  EXPECT_DOUBLE_EQ(s[1].q1, 0.50);
  EXPECT_DOUBLE_EQ(s[1].q3, 0.52);
  EXPECT_DOUBLE_EQ(s[1].ratio, 0.51);
  EXPECT_NEAR(s[1].p, 2.0 / 252, 1e-12);  // every jemalloc run below every glibc run
  EXPECT_TRUE(s[1].significant);
  EXPECT_EQ(s[3].metric, "heap_peak_mib");
  EXPECT_NEAR(s[3].ratio, 1.22, 1e-12);
  EXPECT_TRUE(s[3].significant);  // ties within glibc only: asymptotic, p = 0.0088
  // A baseline of choice, metrics by hand; bad ones are one-line errors.
  o.baseline = "jemalloc";
  o.metrics = {"heap_peak_mib"};
  const auto t = summarise(runs(), o);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[0].ratio, 10.0 / 12.2, 1e-12);
  o.baseline = "tcmalloc";
  EXPECT_THROW(summarise(runs(), o), std::invalid_argument);
  o.baseline = "";
  o.metrics = {"speed"};
  try {
    summarise(runs(), o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("unknown metric 'speed' (known: wall_s, mcalls_per_s,", 0), 0u) << e.what();
  }
}

TEST(Report, Table) {
  ReportOptions o;
  o.title = "demo (session s1)";
  EXPECT_EQ(report(runs(), o),
            "demo (session s1)\n"
            "\n"
            "trace app: median of 5 run(s), ±half the range as % of it, ratio to glibc; * differs from glibc "
            "(Mann-Whitney U, p < 0.05)\n"
            "metric           glibc         jemalloc\n"
            "wall time (s)    1 ±2%  0.51 ±4% 0.51x*\n"
            "heap peak (MiB)     10  12.2 ±2% 1.22x*\n"
            "\n"
            "left out, failed or not faithful (heaplab results export lists them): app on jemalloc: 1 of 6\n");
}

// A trace none of whose runs went into the figures (each failed, or was not
// faithful) is named, not left out in silence; allocators with different
// counts of runs say both.
TEST(Report, RunsLeftOutAreSaid) {
  std::vector<RunRecord> v = {
      {"app", "glibc", 0, false, true, {{"wall_s", 1.0}}},    {"app", "glibc", 1, false, true, {{"wall_s", 1.0}}},
      {"app", "jemalloc", 0, false, true, {{"wall_s", 2.0}}}, {"app", "jemalloc", 1, false, false, {{"wall_s", 2.0}}},
      {"odd", "glibc", 0, false, false, {{"wall_s", 3.0}}},   {"odd", "jemalloc", 0, false, false, {{"wall_s", 3.0}}}};
  EXPECT_EQ(report(v, ReportOptions{}),
            "\n"
            "trace app: median of 1 to 2 run(s), ±half the range as % of it, ratio to glibc; * differs from glibc "
            "(Mann-Whitney U, p < 0.05)\n"
            "metric         glibc  jemalloc\n"
            "wall time (s)      1   2 2.00x\n"
            "\n"
            "left out, failed or not faithful (heaplab results export lists them): app on jemalloc: 1 of 2; odd on "
            "glibc: 1 of 1; odd on jemalloc: 1 of 1\n");
}

TEST(Report, Markdown) {
  ReportOptions o;
  o.format = "md";
  o.baseline = "jemalloc";  // the baseline's column comes first
  EXPECT_EQ(report(runs(), o),
            "\n"
            "## app\n"
            "\n"
            "median of 5 run(s), ±half the range as % of it, ratio to jemalloc; * differs from jemalloc "
            "(Mann-Whitney U, p < 0.05)\n"
            "\n"
            "| metric | jemalloc | glibc |\n"
            "|---|---:|---:|\n"
            "| wall time (s) | 0.51 ±4% | 1 ±2% 1.96x* |\n"
            "| heap peak (MiB) | 12.2 ±2% | 10 0.82x* |\n"
            "\n"
            "left out, failed or not faithful (heaplab results export lists them): app on jemalloc: 1 of 6\n");
}

TEST(Report, Csv) {
  ReportOptions o;
  o.format = "csv";
  o.metrics = {"wall_s"};
  EXPECT_EQ(report(runs(), o),
            "trace,allocator,metric,n,median,q1,q3,min,max,ratio_to_baseline,p_value,significant\n"
            "app,glibc,wall_s,5,1,0.99,1.01,0.98,1.02,1,1,0\n"
            "app,jemalloc,wall_s,5,0.51,0.5,0.52,0.49,0.53,0.51,0.007936507936507936,1\n");
}

TEST(Report, Json) {
  ReportOptions o;
  o.format = "json";
  o.metrics = {"wall_s"};
  EXPECT_EQ(report(runs(), o), R"({
  "alpha": 0.05,
  "baseline": "glibc",
  "summaries": [
    {
      "allocator": "glibc",
      "max": 1.02,
      "median": 1.0,
      "metric": "wall_s",
      "min": 0.98,
      "n": 5,
      "p_value": 1.0,
      "q1": 0.99,
      "q3": 1.01,
      "ratio_to_baseline": 1.0,
      "significant": false,
      "trace": "app"
    },
    {
      "allocator": "jemalloc",
      "max": 0.53,
      "median": 0.51,
      "metric": "wall_s",
      "min": 0.49,
      "n": 5,
      "p_value": 0.007936507936507936,
      "q1": 0.5,
      "q3": 0.52,
      "ratio_to_baseline": 0.51,
      "significant": true,
      "trace": "app"
    }
  ]
}
)");
  o.format = "xml";
  try {
    report(runs(), o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--format: expected table, md, csv or json, not 'xml'");
  }
}

}  // namespace
}  // namespace heaplab::experiments
