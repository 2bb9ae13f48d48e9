// Runs the mtrace importer's fuzz target over logs made by glibc (the
// sample, every kind of line) and deterministic mutations of them, in every
// build (the sanitizer build included), so that ctest exercises the entry
// point and the parser's bounds checks. HEAPLAB_FUZZ_SEED_DIR=DIR writes the
// seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/import/import_fuzz_testutil.h"
#include "capture/import/mtrace.h"

namespace heaplab::import {
namespace {

using trace::testutil::read_file;
using trace::testutil::source_dir;

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  out.push_back(read_file(source_dir() + "/capture/testdata/mtrace/sample.mtrace"));
  EXPECT_FALSE(out.back().empty()) << "sample.mtrace not found under " << source_dir() << " (set HEAPLAB_SOURCE_DIR)";
  out.push_back(
      "= Start\n"
      "@ ./vmt:[0x11de] + 0x563dd35fe4a0 0x10\n"
      "@ ./vmt:[0x1206] < 0x563dd35fe4a0\n"
      "@ ./vmt:[0x1206] > 0x563dd35fe4f0 0x64\n"
      "@ /opt/my app/x:(main+0x1c)[0x12d8] + (nil) 0x7fffffffffffffff\n"
      "@ ./vmt:[0x12ef] ! 0x563dd35fe4f0 0x7fffffffffffffff\n"
      "@ [0x7f00000012ff] - 0x563dd35fe2a0\r\n"
      "@ ./vmt:[0x130b] - 0x563dd35fe4f0\n"
      "= End\n"
      "= Start\n"
      "@ x:[0x1] < 0x10\n"
      "@ x:[0x1] + 0x563dd35fe4f0 0x0\n"
      "@ x:[0x1] + 0x563dd35fe4f0 0xffffffffffffffff\n"
      "= End");  // no newline at the end
  return out;
}

// The seeds import whole, so that their mutations reach every kind of line.
TEST(MtraceFuzz, SeedsImport) { testutil::expect_seeds_import(seeds(), import_mtrace, "seed.mtrace"); }

TEST(MtraceFuzz, SeedsAndMutations) {
  // clang-format off
  const std::vector<std::string> pieces = {
      "@ ", " + ", " - ", " < ", " > ", " ! ", "0x", "(nil)", "= Start\n", "= End\n", "\r", "\n", " ", "\t",
      "0xffffffffffffffffff", "@ x:[0x1] < 0x10\n", "@ x:[0x1] + 0x10 0x8\n"};
  // clang-format on
  testutil::run_mutations(seeds(), pieces, "0123456789abcdefx@+-<>!=() []:\t\n", 4321, "mtrace");
}

}  // namespace
}  // namespace heaplab::import
