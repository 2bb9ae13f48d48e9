// Runs the CMT text importer's fuzz target over valid CMT texts (the
// bundled samples, every call kind and spelling) and deterministic
// mutations of them, in every build (the sanitizer build included), so
// that ctest exercises the entry point and the parser's bounds checks.
// HEAPLAB_FUZZ_SEED_DIR=DIR writes the seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/import/cmt_text.h"
#include "capture/import/import_fuzz_testutil.h"

namespace heaplab::import {
namespace {

using trace::testutil::read_file;
using trace::testutil::source_dir;

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  for (const char* f : {"cli/testdata/small.cmt", "capture/testdata/cmt/401.bzip2.txt"}) {
    out.push_back(read_file(source_dir() + "/" + f));
    EXPECT_FALSE(out.back().empty()) << f << " not found under " << source_dir() << " (set HEAPLAB_SOURCE_DIR)";
  }
  out.push_back(
      "malloc(56) = 0x800e00000\n"
      "calloc(4, 16) = 0x800e00040\n"
      "realloc(0x800e00000, 64) = 0x800e00100\n"
      "reallocarray(0x800e00040, 3, 24) = 0x800e00200\n"
      "memalign(64, 100) = 0x800e00400\n"
      "posix_memalign(32, 48) = 0x800e00500\n"
      "aligned_alloc(4096, 8192) = 0x800e01000\n"
      "valloc(100) = 0x800e04000\n"
      "pvalloc(5000) = 0x800e06000\n"
      "free(0x800e00100)\n"
      "free(0x800e00200)\n"
      "free(0x800e00400)\n"
      "free(0x800e06000)\n");
  out.push_back(
      "malloc(96) = 81d21e160<5>\n"
      "malloc(32) = 81d2899c0<3>\n"
      "realloc(81d21e160<5>, 200) = 81d300000<7>\n"
      "free(81d2899c0<3>)\n"
      "calloc(2, 8) = 81d400000< 12 >\n"
      "free(81d300000<9>)\n"
      "malloc(1) = 0<0>\n");
  out.push_back(
      "# CMT trace\n"
      "\n"
      "   \n"
      "\t\n"
      "  # indented comment\n"
      "  malloc ( 56 )  =  0x10  \n"
      "\tcalloc(\t4 ,16\t)=0x20\r\n"
      "free( 0x10 )\t\r\n"
      "\r\n"
      "free(0x20)");  // no newline at the end
  out.push_back(
      "malloc(100) = 0x0\n"
      "malloc(102) = (nil)\n"
      "malloc(103) = NULL\n"
      "malloc(104) = nil\n"
      "malloc(16) = 0x1000\n"
      "realloc(0x1000, 0) = 0x0\n"
      "free(0x1000)\n"
      "malloc(8) = 0x1000\n"
      "malloc(8) = 0x1000\n"
      "realloc(0xbeef, 10) = 0x3000\n"
      "reallocarray(0x3000, 0, 8) = 0x0\n"
      "free(NULL)\n"
      "free((nil))\n");
  out.push_back(
      "malloc(9223372036854775807) = 0x10\n"
      "malloc(18446744073709551615) = 0x20\n"
      "malloc(0x7fffffffffffffff) = 0x30\n"
      "calloc(18446744073709551615, 4294967296) = 0x0\n"
      "memalign(9223372036854775808, 1) = 0x0\n"
      "realloc(0x10, 9223372036854775808) = 0xffffffffffffffff\n"
      "free(0XFFFFFFFFFFFFFFFF)\n");
  return out;
}

// The seeds import whole, so that their mutations reach every kind of line.
TEST(CmtTextFuzz, SeedsImport) { testutil::expect_seeds_import(seeds(), import_cmt_text, "seed.cmt"); }

TEST(CmtTextFuzz, SeedsAndMutations) {
  // Tokens to splice in.
  // clang-format off
  const std::vector<std::string> pieces = {
      "(", ")", ",", " = ", "0x", "<", ">", "\r", "\n", "#", "(nil)", "NULL", "nil", "0", "-1", "0x0", "\t",
      "realloc(", "18446744073709551616", "free(0x10)\n", "malloc(1) = 0x10\n"};
  // clang-format on
  testutil::run_mutations(seeds(), pieces, "0123456789abcdefx(),=<> \t\n#", 1234, "cmt");
}

}  // namespace
}  // namespace heaplab::import
