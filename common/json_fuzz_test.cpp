// Runs the bounded-JSON fuzz target (json_fuzz.cpp) over seeds and
// deterministic mutations of them in every build (the sanitizer build
// included), so that ctest exercises the entry point and its property.
// HEAPLAB_FUZZ_SEED_DIR=DIR writes the seeds there, as a libFuzzer corpus.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::common {
namespace {

// Texts as a trace's metadata holds them, and the shapes the scan must
// get right: strings holding brackets, commas and escaped quotes, nesting.
std::vector<std::string> texts() {
  return {
      R"({"format":"heaplab","capture":{"pid":1234,"allocator":"glibc","argv":["./a","b,c","[x]"]}})",
      R"({"a":"\"[{,","b":[1,2,{"c":"\\"},[[]]],"d":{}})",
      R"([[[[[[[[1]]]]]]]])",
      R"([1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20])",
      R"({"s":"\u00e9\n\t","n":-1.5e300,"t":true,"f":false,"z":null})",
      R"("just a string, [with] {brackets}")",
      "[{},{},{},{},{},{},{},{}]",
      "{\"k\":[\"\\\\\",\"\\\"\",\"]\"]}",
  };
}

void run(unsigned char bounds, const std::string& text) {
  std::string input(1, static_cast<char>(bounds));
  input += text;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

// The scan and nlohmann agree on what the bounds admit: accepted texts are
// within them (the target aborts otherwise), and refusals say why.
TEST(JsonFuzz, BoundsOnTheSeeds) {
  std::string why;
  EXPECT_TRUE(parse_bounded_json(R"([[[[[[[[1]]]]]]]])", &why, 1 << 20, 7).is_discarded());
  EXPECT_EQ(why, "nested deeper than 7 levels");
  EXPECT_FALSE(parse_bounded_json(R"([[[[[[[[1]]]]]]]])", &why, 1 << 20, 8).is_discarded());
  EXPECT_EQ(why, "");
  // Brackets and commas inside strings (escaped quotes too) are not structure.
  EXPECT_FALSE(parse_bounded_json(R"({"a":"\"[[[[,,,,"})", &why, 1 << 20, 1, 1).is_discarded()) << why;
  EXPECT_TRUE(parse_bounded_json("[1,2,3]", &why, 1 << 20, 4, 2).is_discarded());
  EXPECT_EQ(why, "more than 2 values");
}

TEST(JsonFuzz, SeedsAndMutations) {
  const std::vector<std::string> all = texts();
  const std::vector<std::string> tokens = {"[",  "]",    "{", "}",    ",",      ":", "\"",
                                           "\\", "\\\"", "1", "null", "\"k\":", " "};
  const char* corpus = std::getenv("HEAPLAB_FUZZ_SEED_DIR");
  std::mt19937_64 rng(42);
  int k = 0;
  for (const std::string& seed : all) {
    for (unsigned bounds : {0u, 7u, 255u}) {
      if (corpus && *corpus) {
        std::ofstream(std::string(corpus) + "/json-" + std::to_string(k++), std::ios::binary)
            << static_cast<char>(bounds) << seed;
      }
      run(static_cast<unsigned char>(bounds), seed);
    }
    for (int i = 0; i < 2000; ++i) {
      std::string m = seed;
      const size_t pos = rng() % m.size();
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0)
        m[pos] = static_cast<char>(rng());
      else if (kind == 1)
        m.erase(pos, 1 + rng() % 4);
      else if (kind == 2)
        m.insert(pos, tokens[rng() % tokens.size()]);
      else
        m.insert(pos, all[rng() % all.size()]);
      run(static_cast<unsigned char>(rng()), m);
    }
  }
}

}  // namespace
}  // namespace heaplab::common
