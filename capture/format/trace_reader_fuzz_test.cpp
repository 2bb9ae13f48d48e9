// Runs the fuzz target over valid traces and deterministic mutations of
// them, in every build (the sanitizer build included), so that the fuzz
// entry point and the decoder's bounds checks are exercised by ctest.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "capture/format/trace_testutil.h"
#include "capture/format/trace_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::trace {
namespace {

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  char tmpl[] = "/tmp/heaplab_fuzz_test_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  int k = 0;
  for (Codec codec : {kCodecNone, kCodecLz4, kCodecZstd}) {
    testutil::GenOptions g;
    g.threads = 1 + static_cast<uint32_t>(k % 3);
    g.timestamps = k % 2 == 0;
    std::vector<Event> ev = testutil::generate(static_cast<uint64_t>(k), 300, g);
    WriterOptions opt;
    opt.codec = codec;
    opt.level = 1;
    opt.chunk_events = 40;
    opt.timestamps = g.timestamps;
    const std::string path = dir + "/seed.hlt";
    testutil::write_trace(path, ev, opt);
    out.push_back(testutil::read_file(path));
    ++k;
  }
  {  // format 1.2: with a replay's addresses (ADDR blocks)
    std::vector<Event> ev = testutil::generate(9, 300);
    WriterOptions opt;
    opt.chunk_events = 40;
    opt.timestamps = true;
    const std::string path = dir + "/seed.hlt";
    TraceWriter w(path, opt);
    std::vector<uint64_t> addr;
    for (Event& e : ev) {
      w.append(e);
      addr.push_back(e.seq % 5 ? 0x7f1234560000 + e.seq * 48 : 0);
    }
    w.set_addresses(addr);
    w.close();
    out.push_back(testutil::read_file(path));
  }
  std::filesystem::remove_all(dir);
  return out;
}

void run(const std::string& img, bool repair) {
  std::string in(1, repair ? '\1' : '\0');
  in += img;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(in.data()), in.size());
}

TEST(TraceReaderFuzz, SeedsAndMutations) {
  std::mt19937_64 rng(1234);
  for (const std::string& seed : seeds()) {
    run(seed, false);
    for (int i = 0; i < 1500; ++i) {
      std::string m = seed;
      const int kind = static_cast<int>(rng() % 4);
      const size_t pos = rng() % m.size();
      if (kind == 0) {
        m[pos] = static_cast<char>(rng());
      } else if (kind == 1) {
        for (int j = 0; j < 8 && pos + static_cast<size_t>(j) < m.size(); ++j)
          m[pos + static_cast<size_t>(j)] = static_cast<char>(rng());
      } else if (kind == 2) {
        m.resize(pos);
      } else {
        m.insert(pos, std::string(1 + rng() % 16, static_cast<char>(rng())));
      }
      run(m, (i & 1) != 0);
    }
  }
}

}  // namespace
}  // namespace heaplab::trace
