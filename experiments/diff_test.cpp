// `heaplab diff` of two sessions, on made-up runs: the rows, the verdicts
// and the exact text of each format.
#include "experiments/diff.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace heaplab::experiments {
namespace {

// Five runs of one allocator on one trace: heap peak `peak`, wall times
// around `wall`.
std::vector<RunRecord> runs(const std::string& alloc, double peak, double wall) {
  std::vector<RunRecord> v;
  const double jitter[] = {0.00, 0.02, -0.02, 0.01, -0.01};
  for (int i = 0; i < 5; ++i)
    v.push_back({"app", alloc, i, false, true, {{"wall_s", wall + jitter[i]}, {"heap_peak_mib", peak}}});
  return v;
}

TEST(SessionDiff, TextGolden) {
  std::vector<RunRecord> a = runs("glibc", 100, 1.0), b = runs("glibc", 120, 1.01);
  for (const RunRecord& r : runs("jemalloc", 90, 2.0)) a.push_back(r);
  for (const RunRecord& r : runs("jemalloc", 80, 1.0)) b.push_back(r);
  for (const RunRecord& r : runs("mimalloc", 70, 1.0)) b.push_back(r);  // only in B: not shown
  SessionDiffOptions o;
  o.a = "s1";
  o.b = "s2";
  EXPECT_EQ(session_diff(a, b, o),
            "heaplab diff: A session s1, B session s2\n"
            "medians; B / A; better or worse where Mann-Whitney U says they differ (p < 0.05)\n"
            "\n"
            "app / glibc\n"
            "  metric               A        B  B / A      p\n"
            "  wall_s             1 s   1.01 s  1.01x  0.398\n"
            "  heap_peak_mib  100 MiB  120 MiB  1.20x  0.004  worse\n"
            "\n"
            "app / jemalloc\n"
            "  metric              A       B  B / A      p\n"
            "  wall_s            2 s     1 s  0.50x  0.008  better\n"
            "  heap_peak_mib  90 MiB  80 MiB  0.89x  0.004  better\n");
  o.format = "json";
  const nlohmann::json j = nlohmann::json::parse(session_diff(a, b, o));
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["rows"][1]["verdict"], "worse");
  EXPECT_DOUBLE_EQ(j["rows"][1]["ratio"].get<double>(), 1.2);
  o.format = "md";
  EXPECT_NE(session_diff(a, b, o).find("| heap_peak_mib | 100 MiB | 120 MiB | 1.20x | 0.004 | worse |"),
            std::string::npos);
}

TEST(SessionDiff, NothingInCommonAndBadOptions) {
  SessionDiffOptions o;
  EXPECT_THROW(session_diff(runs("glibc", 1, 1), runs("jemalloc", 1, 1), o), std::invalid_argument);
  o.format = "csv";
  EXPECT_THROW(session_diff(runs("glibc", 1, 1), runs("glibc", 1, 1), o), std::invalid_argument);
  o.format = "text";
  o.alpha = 0;
  EXPECT_THROW(session_diff(runs("glibc", 1, 1), runs("glibc", 1, 1), o), std::invalid_argument);
}

}  // namespace
}  // namespace heaplab::experiments
