// Fuzz target for the Compact Memory Traces text importer, through the
// importers' shared harness (import_fuzz.h): every event on thread 0.
//   libFuzzer with clang, ASan/UBSan (heaplab_fuzz cmt_text_fuzz)
#include <cstddef>
#include <cstdint>

#include "capture/import/cmt_text.h"
#include "capture/import/import_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace heaplab::import;
  return fuzz::import_one(
      "cmt_text_fuzz", "fuzz.cmt", data, size, import_cmt_text,
      [](const CmtImportReport& rep, const auto& check) {
        check(rep.events + rep.skipped_lines + rep.unknown_frees <= rep.lines, "more events than lines");
        check(rep.null_results <= rep.events, "more NULL results than events");
      },
      [](const CmtImportReport&) { return uint64_t{1}; });
}
