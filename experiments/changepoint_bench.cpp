// Precision and recall of the change point detector (experiments/
// changepoint.h) on synthetic histories with known steps
// (changepoint_synth.h): per noise kind and step size, N histories of
// LENGTH points with 1 to 3 steps each, and N steady histories (no step)
// for false alarms. A change point within MARGIN points of a true step
// finds it (each step found at most once).
//
//   changepoint_bench [N=200] [LENGTH=60] [MARGIN=2] [MIN_SIZE=4] [SIGNIFICANCE=0.01]
//
// Prints a Markdown table (BENCHMARKS.md "Change points").
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "experiments/changepoint.h"
#include "experiments/changepoint_synth.h"

using namespace heaplab::experiments;

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 200;
  const size_t length = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 60;
  const size_t margin = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 2;
  ChangePointOptions opt;
  if (argc > 4) opt.min_size = std::strtoul(argv[4], nullptr, 10);
  if (argc > 5) opt.significance = std::strtod(argv[5], nullptr);
  if (n == 0 || length < 24 || opt.min_size < 2) {
    std::fprintf(stderr, "changepoint_bench: N > 0, LENGTH >= 24, MIN_SIZE >= 2\n");
    return 2;
  }
  std::printf(
      "%zu histories per row, %zu points each, 1-3 steps at least 8 points apart; found within +-%zu points; "
      "min_size %zu, significance %g, %zu permutations\n\n",
      n, length, margin, opt.min_size, opt.significance, opt.permutations);
  std::printf(
      "| noise | step (sigma) | true steps | found | precision | recall | F1 | false alarms per steady "
      "history | ms per history |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::mt19937_64 rng(20261125);
  for (const bool heavy : {false, true}) {
    for (const double step : {1.0, 2.0, 3.0, 5.0}) {
      synth::Score s;
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < n; ++i) {
        const synth::History h = synth::history(rng, length, 1 + i % 3, step, heavy);
        synth::score(h, e_divisive(h.x, opt), margin, s);
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / double(n);
      size_t alarms = 0;
      for (size_t i = 0; i < n; ++i) alarms += e_divisive(synth::history(rng, length, 0, 0, heavy).x, opt).size();
      std::printf("| %s | %.0f | %zu | %zu | %.3f | %.3f | %.3f | %.3f | %.2f |\n", heavy ? "Student t3" : "Gaussian",
                  step, s.true_steps, s.found, s.precision(), s.recall(), s.f1(), double(alarms) / double(n), ms);
    }
  }
  return 0;
}
