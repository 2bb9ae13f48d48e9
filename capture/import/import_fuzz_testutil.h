// What the importers' fuzz drivers share: the check that a driver's seeds import whole (so that their
// mutations reach every kind of line), and the deterministic mutations a
// driver runs through its fuzz target in every build.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"
#include "capture/import/input_stream.h"
#include "capture/import/string_input_testutil.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::import::testutil {

// Every seed imports whole with `import(InputStream&, TraceWriter&)` into
// at least `min_events` events.
template <class Import>
void expect_seeds_import(const std::vector<std::string>& seeds, Import import, const std::string& name,
                         uint64_t min_events = 4) {
  trace::testutil::TempDir dir;
  for (const std::string& seed : seeds) {
    StringInput in(seed, name);
    trace::TraceWriter w(dir.file("seed.hlt"), trace::WriterOptions{});
    try {
      EXPECT_GE(import(in, w).events, min_events);
    } catch (const InputError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

inline void run_fuzz_target(const std::string& text) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// Each seed, and 600 mutations of it, through the fuzz target: a byte
// changed to anything or to one of `syntax`, the text cut short, one of
// `pieces` inserted, or a line of any seed spliced in. With
// HEAPLAB_FUZZ_SEED_DIR=DIR the seeds are written there as DIR/PREFIX-K, a
// libFuzzer corpus.
inline void run_mutations(const std::vector<std::string>& seeds, const std::vector<std::string>& pieces,
                          std::string_view syntax, uint64_t rng_seed, const std::string& corpus_prefix) {
  std::vector<std::string> lines;  // every line of the seeds, with its newline
  for (const std::string& s : seeds)
    for (size_t b = 0; b < s.size();) {
      const size_t e = std::min(s.find('\n', b), s.size() - 1);
      lines.push_back(s.substr(b, e - b + 1));
      b = e + 1;
    }
  const char* corpus = std::getenv("HEAPLAB_FUZZ_SEED_DIR");
  std::mt19937_64 rng(rng_seed);
  int k = 0;
  for (const std::string& seed : seeds) {
    if (corpus && *corpus)
      trace::testutil::write_file(std::string(corpus) + "/" + corpus_prefix + "-" + std::to_string(k++), seed);
    run_fuzz_target(seed);
    if (seed.empty()) continue;  // a sample not found (reported by the driver)
    for (int i = 0; i < 600; ++i) {
      std::string m = seed;
      const int kind = static_cast<int>(rng() % 5);
      const size_t pos = rng() % m.size();
      if (kind == 0) {
        m[pos] = static_cast<char>(rng());
      } else if (kind == 1) {
        m[pos] = syntax[rng() % syntax.size()];
      } else if (kind == 2) {
        m.resize(pos);
      } else if (kind == 3) {
        m.insert(pos, pieces[rng() % pieces.size()]);
      } else {
        m.insert(pos, lines[rng() % lines.size()]);  // splice: a line of any seed
      }
      run_fuzz_target(m);
    }
  }
}

}  // namespace heaplab::import::testutil
