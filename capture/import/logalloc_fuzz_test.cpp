// Runs the logalloc importer's fuzz target over logs in logalloc's syntax
// (the sample, the munged form) and deterministic mutations of them, in every
// build (the sanitizer build included), so that ctest exercises the entry
// point and the parser's bounds checks. HEAPLAB_FUZZ_SEED_DIR=DIR writes the
// seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"
#include "capture/import/input_stream.h"
#include "capture/import/logalloc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::import {
namespace {

using trace::testutil::read_file;
using trace::testutil::source_dir;

class MemoryInput final : public InputStream {
 public:
  explicit MemoryInput(std::string data) : data_(std::move(data)) { name_ = "seed.log"; }
  size_t read(char* buf, size_t n) override {
    const size_t k = std::min(n, data_.size() - pos_);
    data_.copy(buf, k, pos_);
    pos_ += k;
    return k;
  }
  const char* compression() const override { return "none"; }

 private:
  std::string data_;
  size_t pos_ = 0;
};

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
TEST(LogallocFuzz, SeedsImport) {
  trace::testutil::TempDir dir;
  for (const std::string& seed : seeds()) {
    MemoryInput in(seed);
    trace::TraceWriter w(dir.file("seed.hlt"), trace::WriterOptions{});
    try {
      EXPECT_GE(import_logalloc(in, w).events, 4u);
    } catch (const InputError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

void run(const std::string& text) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

TEST(LogallocFuzz, SeedsAndMutations) {
  const std::vector<std::string> all = seeds();
  // clang-format off
  const std::vector<std::string> pieces = {
      "(", ")", ",", "=", "0x", "#", "(nil)", " ", "\r", "\n", "1 1 ", "malloc(", "free(", "realloc(",
      "moz_arena_malloc(", "18446744073709551616", "1 1 free(0x10)\n", "1 2 malloc(1)=0x10\n"};
  // clang-format on
  std::vector<std::string> lines;
  for (const std::string& s : all)
    for (size_t b = 0; b < s.size();) {
      const size_t e = std::min(s.find('\n', b), s.size() - 1);
      lines.push_back(s.substr(b, e - b + 1));
      b = e + 1;
    }
  constexpr std::string_view kSyntax = "0123456789abcdefx#(),= \n";
  const char* corpus = std::getenv("HEAPLAB_FUZZ_SEED_DIR");
  std::mt19937_64 rng(8765);
  int k = 0;
  for (const std::string& seed : all) {
    if (corpus && *corpus) trace::testutil::write_file(std::string(corpus) + "/logalloc-" + std::to_string(k++), seed);
    run(seed);
    if (seed.empty()) continue;
    for (int i = 0; i < 600; ++i) {
      std::string m = seed;
      const int kind = static_cast<int>(rng() % 5);
      const size_t pos = rng() % m.size();
      if (kind == 0) {
        m[pos] = static_cast<char>(rng());
      } else if (kind == 1) {
        m[pos] = kSyntax[rng() % kSyntax.size()];
      } else if (kind == 2) {
        m.resize(pos);
      } else if (kind == 3) {
        m.insert(pos, pieces[rng() % pieces.size()]);
      } else {
        m.insert(pos, lines[rng() % lines.size()]);
      }
      run(m);
    }
  }
}

}  // namespace
}  // namespace heaplab::import
