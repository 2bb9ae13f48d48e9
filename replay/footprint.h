// The heap's page footprint: how many pages of the process's anonymous
// private mappings are resident (mincore), leaving out given address ranges
// (the replayer's own bookkeeping). Allocation-free: it reads
// /proc/self/maps and calls mincore through buffers mapped once, so it can
// run on the sampler thread while the allocator under test is being replayed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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
  int64_t resident_pages() { return count(false); }

  // Pages written since the last clear_soft_dirty() (soft-dirty bits in
  // /proc/self/pagemap), over the same mappings; -1 if unavailable. Needs
  // enable_soft_dirty() first.
  int64_t soft_dirty_pages() { return count(true); }
  // Whether the kernel keeps soft-dirty bits (CONFIG_MEM_SOFT_DIRTY), tried
  // on a page of its own; if not, false and the reason in `why`. If so,
  // maps the pagemap buffer.
  bool enable_soft_dirty(std::string& why);
  // Clears every soft-dirty bit of the process (/proc/self/clear_refs).
  static bool clear_soft_dirty();
  // Anonymous bytes of its own buffers (mapped and populated).
  uint64_t mapped_bytes() const;

 private:
  int64_t count(bool soft_dirty);
  void count_range(uintptr_t begin, uintptr_t end, bool soft_dirty, uint64_t& pages);
  int pagemap_fd_ = -1;
  uint64_t* entries_ = nullptr;  // pagemap entries, kChunkPages at a time
  uintptr_t ex_begin_[kMaxExcluded] = {}, ex_end_[kMaxExcluded] = {};
  size_t excluded_ = 0;
  char* text_ = nullptr;          // /proc/self/maps, read in pieces
  unsigned char* vec_ = nullptr;  // mincore's vector, kChunkPages at a time
  uint64_t page_ = 4096;
};

}  // namespace heaplab::replay
