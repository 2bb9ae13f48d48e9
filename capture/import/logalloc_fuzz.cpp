// Fuzz target for the Firefox logalloc importer, through the importers'
// shared harness (import_fuzz.h): events on the threads the report counts.
//   libFuzzer with clang, ASan/UBSan (heaplab_fuzz logalloc_fuzz)
#include <cstddef>
#include <cstdint>

#include "capture/import/import_fuzz.h"
#include "capture/import/logalloc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace heaplab::import;
  return fuzz::import_one(
      "logalloc_fuzz", "fuzz.log", data, size, import_logalloc,
      [](const LogallocImportReport& rep, const auto& check) {
        check(rep.events + rep.other_process_lines + rep.skipped_calls + rep.unknown_frees <= rep.lines,
              "more events than lines");
        check(rep.threads <= rep.events, "more threads than events");
      },
      [](const LogallocImportReport& rep) { return rep.threads; });
}
