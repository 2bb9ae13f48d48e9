// main() of heaplab's Google Benchmark programs: the library's flags plus
// --heaplab_smoke (tiny inputs, for the ctest smoke run that keeps each
// benchmark working).
#pragma once

#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

namespace heaplab {

inline int bench_main(int argc, char** argv, bool* smoke) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--heaplab_smoke") == 0) {
      *smoke = true;
      continue;
    }
    args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace heaplab
