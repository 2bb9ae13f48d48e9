// Fuzz target for the heaptrack importer, through the importers' shared
// harness (import_fuzz.h): every event on thread 0.
//   libFuzzer with clang, ASan/UBSan (heaplab_fuzz heaptrack_fuzz)
#include <cstddef>
#include <cstdint>

#include "capture/import/heaptrack.h"
#include "capture/import/import_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace heaplab::import;
  return fuzz::import_one(
      "heaptrack_fuzz", "fuzz.ht", data, size, import_heaptrack,
      [](const HeaptrackImportReport& rep, const auto& check) {
        check(rep.events + rep.unknown_frees <= rep.lines, "more events than lines");
        check(rep.allocations + rep.deallocations == rep.events, "allocations and deallocations do not add up");
        check(rep.deallocations <= rep.allocations, "more deallocations than allocations");
      },
      [](const HeaptrackImportReport&) { return uint64_t{1}; });
}
