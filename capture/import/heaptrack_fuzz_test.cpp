// Runs the heaptrack importer's fuzz target over recordings in heaptrack
// 1.4's format (every kind of record) and deterministic mutations of them, in every
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
#include "capture/import/heaptrack.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::import {
namespace {

class MemoryInput final : public InputStream {
 public:
  explicit MemoryInput(std::string data) : data_(std::move(data)) { name_ = "seed.ht"; }
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
TEST(HeaptrackFuzz, SeedsImport) {
  trace::testutil::TempDir dir;
  for (const std::string& seed : seeds()) {
    MemoryInput in(seed);
    trace::TraceWriter w(dir.file("seed.hlt"), trace::WriterOptions{});
    try {
      EXPECT_GE(import_heaptrack(in, w).events, 4u);
    } catch (const InputError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

void run(const std::string& text) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

TEST(HeaptrackFuzz, SeedsAndMutations) {
  const std::vector<std::string> all = seeds();
  // clang-format off
  const std::vector<std::string> pieces = {
      "+ ", "- ", "a ", "c ", "v 10400 3\n", "+ 0\n", "- 0\n", "a 10 1\n", "c ffffffffff\n", "\r", "\n", " ",
      "ffffffffffffffffff", "# x\n", "X cmd\n"};
  // clang-format on
  std::vector<std::string> lines;
  for (const std::string& s : all)
    for (size_t b = 0; b < s.size();) {
      const size_t e = std::min(s.find('\n', b), s.size() - 1);
      lines.push_back(s.substr(b, e - b + 1));
      b = e + 1;
    }
  constexpr std::string_view kSyntax = "0123456789abcdef+-acvRXIsit# \n";
  const char* corpus = std::getenv("HEAPLAB_FUZZ_SEED_DIR");
  std::mt19937_64 rng(5678);
  int k = 0;
  for (const std::string& seed : all) {
    if (corpus && *corpus) trace::testutil::write_file(std::string(corpus) + "/heaptrack-" + std::to_string(k++), seed);
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
