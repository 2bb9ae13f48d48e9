// Fuzz target for the trace reader and chunk decoder. The first input byte
// chooses whether checksums are repaired before reading, so that mutated
// bytes also reach the decoders behind the checksums.
//   scripts/fuzz.sh 60        (libFuzzer with clang, ASan/UBSan)
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string img(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1) heaplab::trace::testutil::repair_checksums(img);
  try {
    auto r = heaplab::trace::TraceReader::from_memory(img, "fuzz");
    std::vector<heaplab::trace::Event> buf(257);
    heaplab::trace::MergedCursor merged(*r);
    heaplab::trace::AddressCursor addresses(*r);  // (format 1.2's ADDR blocks)
    uint64_t sum = 0;
    while (size_t n = merged.next(buf.data(), buf.size()))
      for (size_t i = 0; i < n; ++i) sum += addresses.at(buf[i].seq);
    for (const auto& b : r->address_blocks()) sum += addresses.at(b.first_seq + b.count - 1);
    if (sum == 1) return 0;  // (keeps the reads)
    for (uint32_t t : r->active_threads()) {
      heaplab::trace::ThreadCursor c(*r, t);
      while (c.next(buf.data(), buf.size()) != 0) {
      }
    }
    // (format 1.1's MEMX block, read again after the reader checked it)
    heaplab::trace::MemoryCursor memory(*r);
    uint64_t records = 0;
    while (memory.next() != nullptr) ++records;
    if (records != r->memory_event_count()) __builtin_trap();
  } catch (const heaplab::trace::TraceError&) {
    // Rejecting bad input with an error is the expected outcome.
  }
  return 0;
}
