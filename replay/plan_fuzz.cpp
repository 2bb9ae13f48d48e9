// Fuzz target for reading a replay plan as the replayer does (a kept plan
// from the plan cache is a file anyone could have damaged): MappedPlan
// checks the header and thread table, then the pager maps and checks every
// window of every thread (replay/plan_pager.h: what the engine trusts).
// Properties: no crash, no read outside the file and no unbounded
// allocation on any bytes; thread step counts that add up.
//   scripts/fuzz.sh 60 plan_fuzz      (libFuzzer with clang, ASan/UBSan)
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "replay/engine.h"
#include "replay/plan.h"
#include "replay/plan_pager.h"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "plan_fuzz: %s\n", what);
  std::abort();
}

struct Damaged {
  std::string message;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace heaplab::replay;
  static const int fd = memfd_create("plan_fuzz", MFD_CLOEXEC);
  if (fd < 0) broken("memfd_create failed");
  if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != ssize_t(size))) broken("cannot write the memfd");
  std::unique_ptr<MappedPlan> plan;
  try {
    plan = std::make_unique<MappedPlan>(fd);
  } catch (const PlanError&) {
    return 0;
  }
  uint64_t sum = 0;
  for (uint32_t t = 0; t < plan->threads(); ++t) sum += plan->step_count(t);
  if (sum != plan->total_steps()) broken("thread step counts accepted that do not add up");
  // Every window, on this thread (a replayer's pager thread does it ahead
  // of the replay threads, with the same checks).
  auto results = std::make_unique<ThreadResult[]>(std::max<uint32_t>(1, plan->threads()));
  try {
    PlanPager pager(
        *plan, results.get(), 512, [](const std::string& m) { throw Damaged{m}; }, "plan_fuzz");
    pager.prime();
    pager.check_all();
  } catch (const Damaged&) {
  }
  return 0;
}
