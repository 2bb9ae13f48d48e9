// Runs the plan-reading fuzz target (plan_fuzz.cpp) over plans build_plan
// makes (threads handing objects to each other, reallocs, recorded times and
// live sums) and deterministic mutations of them, in every build (the
// sanitizer build included). HEAPLAB_FUZZ_SEED_DIR=DIR writes the seeds
// there, as a libFuzzer corpus.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "replay/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::replay {
namespace {

using trace::Event;
using trace::Op;
using trace::testutil::alloc;
using trace::testutil::ev;
using trace::testutil::release;

// A plan's bytes, from its descriptor.
std::string bytes_of(int fd) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  std::string out(size_t(st.st_size), '\0');
  EXPECT_EQ(pread(fd, out.data(), out.size(), 0), ssize_t(out.size()));
  return out;
}

// Three threads: thread 0 makes objects that threads 1 and 2 free and
// realloc (handoffs), each thread its own too; with times and live sums,
// and folded onto two replay threads.
std::vector<std::string> seeds() {
  std::vector<Event> evs;
  uint64_t time = 1000;
  for (uint32_t t = 0; t < 3; ++t) evs.push_back(ev(Op::thread_start, t, time++));
  uint64_t id = 0;
  for (int i = 0; i < 40; ++i) {
    evs.push_back(alloc(16 + i, 0, time++));
    const uint64_t made = ++id;
    evs.push_back(alloc(100, 1 + i % 2, time++));
    const uint64_t own = ++id;
    if (i % 3 == 0) {
      Event re = ev(Op::realloc, 1 + i % 2, time++);
      re.old = made;
      re.size = 64;
      evs.push_back(re);
      evs.push_back(release(++id, 1 + i % 2, time++));
    } else {
      evs.push_back(release(made, 1 + i % 2, time++));
    }
    evs.push_back(release(own, 1 + i % 2, time++));
  }
  for (uint32_t t = 0; t < 3; ++t) evs.push_back(ev(Op::thread_end, t, time++));
  trace::testutil::TempDir dir;
  const std::string path = dir.file("t.hlt");
  trace::WriterOptions wo;
  wo.timestamps = true;
  trace::testutil::write_trace(path, evs, wo);
  auto r = trace::TraceReader::open(path);
  std::vector<std::string> out;
  for (const PlanOptions& opt : {PlanOptions{}, PlanOptions{0, true, true}, PlanOptions{2, true, false}}) {
    PlanSummary s;
    const int fd = build_plan(*r, opt, s);
    out.push_back(bytes_of(fd));
    close(fd);
  }
  return out;
}

void run(const std::string& bytes) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// The seeds are plans a replayer reads: MappedPlan takes them whole.
TEST(PlanFuzz, SeedsAreValidPlans) {
  const std::vector<std::string> s = seeds();
  ASSERT_EQ(s.size(), 3u);
  for (size_t i = 0; i < s.size(); ++i) {
    run(s[i]);
    const int fd = memfd_create("seed", MFD_CLOEXEC);
    ASSERT_EQ(pwrite(fd, s[i].data(), s[i].size(), 0), ssize_t(s[i].size()));
    const MappedPlan p(fd);
    EXPECT_GT(p.total_steps(), 150u);
    EXPECT_EQ(p.threads(), i == 2 ? 2u : 3u);
    close(fd);
    if (const char* dir = std::getenv("HEAPLAB_FUZZ_SEED_DIR"))
      std::ofstream(std::string(dir) + "/plan" + std::to_string(i) + ".seed", std::ios::binary) << s[i];
  }
}

// Mutations where a reader goes wrong: the header page (counts, offsets,
// flags) as 8-byte words set to edge or random values, random bytes in the
// steps, and plans cut short.
TEST(PlanFuzz, SeedsAndMutations) {
  std::mt19937_64 rng(20261127);
  const uint64_t edges[] = {0, 1, 2, 7, 8, 4096, 0xffffffff, 0x100000000ull, ~0ull >> 1, ~0ull};
  uint64_t runs = 0;
  for (const std::string& seed : seeds()) {
    for (int i = 0; i < 800; ++i) {
      std::string m = seed;
      for (int k = int(1 + rng() % 3); k > 0; --k) {
        const uint64_t word = rng() % std::min<uint64_t>(512, m.size() / 8);
        const uint64_t v = rng() % 3 ? edges[rng() % std::size(edges)] : rng();
        std::memcpy(m.data() + word * 8, &v, rng() % 2 ? 8 : 4);
      }
      for (int k = int(rng() % 6); k > 0; --k) m[rng() % m.size()] = char(rng());
      if (rng() % 8 == 0) m.resize(rng() % m.size());
      run(m);
      ++runs;
    }
  }
  EXPECT_EQ(runs, 2400u);
}

}  // namespace
}  // namespace heaplab::replay
