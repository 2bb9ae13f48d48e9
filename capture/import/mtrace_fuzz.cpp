// Fuzz target for glibc's mtrace importer, through the importers' shared
// harness (import_fuzz.h): every event on thread 0.
//   libFuzzer with clang, ASan/UBSan (heaplab_fuzz mtrace_fuzz)
#include <cstddef>
#include <cstdint>

#include "capture/import/import_fuzz.h"
#include "capture/import/mtrace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace heaplab::import;
  return fuzz::import_one(
      "mtrace_fuzz", "fuzz.mtrace", data, size, import_mtrace,
      [](const MtraceImportReport& rep, const auto& check) {
        check(rep.events + rep.traces + rep.unknown_frees <= rep.lines, "more events than lines");
        check(rep.failed <= rep.events, "more failed calls than events");
      },
      [](const MtraceImportReport&) { return uint64_t{1}; });
}
