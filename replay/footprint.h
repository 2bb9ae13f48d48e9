// The heap's page footprint: how many pages of the process's anonymous
// private mappings are resident (mincore), leaving out given address ranges
// (the replayer's own bookkeeping). Allocation-free: it reads
// /proc/self/maps and calls mincore through buffers mapped once, so it can
// run on the sampler thread while the allocator under test is being replayed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace heaplab::replay {

class FootprintCounter {
 public:
  static constexpr size_t kMaxExcluded = 16;
  FootprintCounter();
  ~FootprintCounter();
  FootprintCounter(const FootprintCounter&) = delete;
  FootprintCounter& operator=(const FootprintCounter&) = delete;

  // Leaves [begin, begin + len) out of the count (at most kMaxExcluded).
  void exclude(const void* begin, size_t len);
  // Resident pages of anonymous private mappings, less the excluded ranges;
  // -1 if /proc/self/maps cannot be read.
  int64_t resident_pages();

 private:
  void count_range(uintptr_t begin, uintptr_t end, uint64_t& pages);
  uintptr_t ex_begin_[kMaxExcluded] = {}, ex_end_[kMaxExcluded] = {};
  size_t excluded_ = 0;
  char* text_ = nullptr;            // /proc/self/maps, read in pieces
  unsigned char* vec_ = nullptr;    // mincore's vector, kChunkPages at a time
  uint64_t page_ = 4096;
};

}  // namespace heaplab::replay
