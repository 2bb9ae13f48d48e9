// Runs the heaptrack importer's fuzz target over recordings in heaptrack
// 1.4's format (every kind of record) and deterministic mutations of them, in every
// build (the sanitizer build included), so that ctest exercises the entry
// point and the parser's bounds checks. HEAPLAB_FUZZ_SEED_DIR=DIR writes the
// seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/import/heaptrack.h"
#include "capture/import/import_fuzz_testutil.h"

namespace heaplab::import {
namespace {

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  out.push_back(
      "v 10400 3\n"
      "X ./mt\n"
      "I 1000 5e298f\n"
      "s a /tmp/fw/mt\n"
      "s 1f /lib/x86_64-linux-gnu/libc.so.6\n"
      "i 7fc40c4cab9f 8 0 b 0\n"
      "t 1 0\n"
      "i 7fc40c4b4b03 8 c d 79\n"
      "t 2 1\n"
      "a 11c00 2\n"
      "+ 0\n"
      "a 10 1\n"
      "+ 1\n"
      "a 20 1\n"
      "+ 2\n"
      "- 1\n"
      "c 5\n"
      "a 64 2\n"
      "+ 3\n"
      "+ 1\n"
      "- 2\n"
      "- 1\n"
      "R 3f5\n"
      "c 1a\n"
      "- 3\n"
      "- 0\n"
      "- 0\n"
      "A\n"
      "\n"
      "# strings: 33\n"
      "# ips: 20\n");
  out.push_back(
      "v 10200 2\r\n"
      "a ffffffffffffffff 0\r\n"
      "+ 0\r\n"
      "a 0 0\r\n"
      "+ 1\r\n"
      "+ 1\r\n"
      "c 0\r\n"
      "- 1\r\n"
      "- 0");  // no newline at the end
  return out;
}

// The seeds import whole, so that their mutations reach every kind of line.
TEST(HeaptrackFuzz, SeedsImport) { testutil::expect_seeds_import(seeds(), import_heaptrack, "seed.ht"); }

TEST(HeaptrackFuzz, SeedsAndMutations) {
  // clang-format off
  const std::vector<std::string> pieces = {
      "+ ", "- ", "a ", "c ", "v 10400 3\n", "+ 0\n", "- 0\n", "a 10 1\n", "c ffffffffff\n", "\r", "\n", " ",
      "ffffffffffffffffff", "# x\n", "X cmd\n"};
  // clang-format on
  testutil::run_mutations(seeds(), pieces, "0123456789abcdef+-acvRXIsit# \n", 5678, "heaptrack");
}

}  // namespace
}  // namespace heaplab::import
