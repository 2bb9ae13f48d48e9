// Runs the logalloc importer's fuzz target over logs in logalloc's syntax
// (the sample, the munged form) and deterministic mutations of them, in every
// build (the sanitizer build included), so that ctest exercises the entry
// point and the parser's bounds checks. HEAPLAB_FUZZ_SEED_DIR=DIR writes the
// seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/import/import_fuzz_testutil.h"
#include "capture/import/logalloc.h"

namespace heaplab::import {
namespace {

using trace::testutil::read_file;
using trace::testutil::source_dir;

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  out.push_back(read_file(source_dir() + "/capture/testdata/logalloc/sample.log"));
  EXPECT_FALSE(out.back().empty()) << "sample.log not found under " << source_dir() << " (set HEAPLAB_SOURCE_DIR)";
  out.push_back(
      "1 1 malloc(16)=#1\n"
      "1 2 realloc(#1,32)=#1\n"
      "1 2 calloc(3,8)=#2\r\n"
      "1 1 realloc(#2,0)=(nil)\n"
      "1 1 free(#1)\n"
      "1 3 memalign(16,0)=#3\n"
      "1 3 free((nil))\n"
      "77 malloc(5)=0x10\n"
      "1 1 free(#9)\n"
      "1 1 moz_arena_realloc(2,#3,18446744073709551615)=#4");  // no newline at the end
  return out;
}

// The seeds import whole, so that their mutations reach every kind of line.
TEST(LogallocFuzz, SeedsImport) { testutil::expect_seeds_import(seeds(), import_logalloc, "seed.log"); }

TEST(LogallocFuzz, SeedsAndMutations) {
  // clang-format off
  const std::vector<std::string> pieces = {
      "(", ")", ",", "=", "0x", "#", "(nil)", " ", "\r", "\n", "1 1 ", "malloc(", "free(", "realloc(",
      "moz_arena_malloc(", "18446744073709551616", "1 1 free(0x10)\n", "1 2 malloc(1)=0x10\n"};
  // clang-format on
  testutil::run_mutations(seeds(), pieces, "0123456789abcdefx#(),= \n", 8765, "logalloc");
}

}  // namespace
}  // namespace heaplab::import
