// Runs the experiment-file fuzz target over valid experiment files (the
// bundled ones and those of spec_test) and deterministic mutations of them,
// in every build (the sanitizer build included), so that ctest exercises
// the entry point.
// HEAPLAB_FUZZ_SEED_DIR=DIR writes the seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "experiments/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// The source tree: $HEAPLAB_SOURCE_DIR (set by ctest), else the compile-time
// HEAPLAB_TEST_SOURCE_DIR of the test target.
#ifndef HEAPLAB_TEST_SOURCE_DIR
#define HEAPLAB_TEST_SOURCE_DIR "."
#endif

namespace heaplab::experiments {
namespace {

std::string source_dir() {
  const char* env = std::getenv("HEAPLAB_SOURCE_DIR");
  return env && *env ? env : HEAPLAB_TEST_SOURCE_DIR;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  for (const char* f : {"experiments/quick-start.yaml", "experiments/allocator-settings.yaml"}) {
    out.push_back(read_file(source_dir() + "/" + f));
    EXPECT_FALSE(out.back().empty()) << f << " not found under " << source_dir() << " (set HEAPLAB_SOURCE_DIR)";
  }
  out.push_back(
      "name: settings\n"
      "traces:\n"
      "  - name: app\n"
      "    capture: [sqlite3, ':memory:', '.read {experiment_dir}/w.sql']\n"
      "    capture_allocator: jemalloc\n"
      "  - {name: hmmer, file: results/456.hmmer.hlt}\n"
      "allocators:\n"
      "  - glibc\n"
      "  - name: jemalloc\n"
      "    load: direct\n"
      "    env: {MALLOC_CONF: 'narenas:1', JEMALLOC_X: 3}\n"
      "  - {name: jemalloc, label: je-default}\n"
      "replay: {threads: 2, touch: all, timing: recorded, speed: 2.5, pin: compact, latency: 16, sample_ms: 5}\n"
      "metrics: [wall_s, heap_peak_mib]\n"
      "repetitions: 7\n"
      "warmup: 0\n"
      "baseline: je-default\n");
  out.push_back("traces: [{name: t, file: '{experiment_dir}/x.hlt'}]\nallocators: [glibc, mimalloc]\n");
  out.push_back(
      "# Anchors, aliases, block scalars, a document marker.\n"
      "---\n"
      "description: |\n"
      "  two\n"
      "  lines\n"
      "traces:\n"
      "  - &t {name: t1, file: \"a \\\"quoted\\\" {experiment_dir}{experiment_dir}\"}\n"
      "  - name: t2\n"
      "    capture:\n"
      "      - ls\n"
      "      - >\n"
      "        folded\n"
      "allocators:\n"
      "  - &g glibc\n"
      "  - {name: *g, label: g2, env: {A: '1', B: \"2\"}}\n"
      "  - {name: /usr/lib/libx.so, load: preload}\n"
      "replay: {pin: '0,2', membind: '0,1', speed: 1e3, threads: 0}\n"
      "baseline: g2\n"
      "...\n");
  return out;
}

void run(const std::string& text) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// The seeds are valid, so that their mutations reach past the YAML parser.
TEST(SpecFuzz, SeedsAreValid) {
  for (const std::string& seed : seeds()) {
    try {
      parse_experiment(seed, "/fuzz/dir/exp.yaml");
    } catch (const SpecError& e) {
      ADD_FAILURE() << e.what() << "\n" << seed;
    }
  }
}

TEST(SpecFuzz, SeedsAndMutations) {
  const std::vector<std::string> all = seeds();
  // Tokens to splice in: YAML syntax, and keys and values of experiment files.
  // clang-format off
  const std::vector<std::string> tokens = {
      "{", "}", "[", "]", ",", ":", ": ", "- ", "? ", "&a ", "*a", "!!str ", "!!map ", "!x ", "'", "\"",
      "|\n", ">-\n", "\n  ", "\n    - ", "\t", "#", "---\n", "...\n", "%YAML 1.2\n", "\\u00e9", "~", "null",
      "<<: ", "\xc3\xa9", "\xff", "name", "traces", "allocators", "replay", "file", "capture", "label", "env",
      "load", "baseline", "metrics", "-1", "1e9999", "nan", "18446744073709551616", "{experiment_dir}", "{}",
      "[]", "''"};
  // clang-format on
  const char* corpus = std::getenv("HEAPLAB_FUZZ_SEED_DIR");
  std::mt19937_64 rng(1234);
  int k = 0;
  for (const std::string& seed : all) {
    if (corpus && *corpus) {
      std::ofstream(std::string(corpus) + "/spec-" + std::to_string(k++), std::ios::binary) << seed;
    }
    run(seed);
    if (seed.empty()) continue;  // a file not found (reported above)
    for (int i = 0; i < 500; ++i) {
      std::string m = seed;
      const int kind = static_cast<int>(rng() % 5);
      const size_t pos = rng() % m.size();
      if (kind == 0) {
        m[pos] = static_cast<char>(rng());
      } else if (kind == 1) {
        m.erase(pos, 1 + rng() % 8);
      } else if (kind == 2) {
        m.resize(pos);
      } else if (kind == 3) {
        m.insert(pos, tokens[rng() % tokens.size()]);
      } else {
        // Splice: a run of another seed.
        const std::string& other = all[rng() % all.size()];
        if (!other.empty()) m.insert(pos, other.substr(rng() % other.size(), 1 + rng() % 40));
      }
      run(m);
    }
  }
}

}  // namespace
}  // namespace heaplab::experiments
