// The program's own mappings while a capture is normalised: turns the raw
// mmap/munmap/mremap/madvise/brk records (addresses) into the trace's memory
// events (region ids and offsets), and places each measured resident-page
// count as a `touch` right after the previous event of its region (the pages
// were in use from then on). Memory follows the program's mappings.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/format/memory_event.h"
#include "capture/normalise/memory_sorter.h"

namespace heaplab::normalise {

struct MemoryPosition {
  uint64_t after = 0;  // heap events written before it
  uint32_t thread = 0;
  uint64_t time = 0;
};

struct MemoryCounts {
  uint64_t calls = 0;              // mapping calls recorded
  uint64_t regions = 0;            // regions mapped
  uint64_t unknown_releases = 0;   // unmaps/advice on memory the program did not map while captured
  uint64_t measured = 0;           // resident-page counts taken
  uint64_t latencies = 0;          // calls timed in the program, kept
  uint64_t latencies_dropped = 0;  // timed, and thinned out (MemoryMap::kMaxLatencies)
};

class MemoryMap {
 public:
  // `scratch_dir`: where the records go once more than a run of them
  // (MemorySorter) has been made: beside the trace.
  // At most this many timed calls are kept (a bound on the trace: its
  // memory block holds at most 1 GiB). Past it, the calls kept are thinned
  // evenly over the whole run, not the first ones kept: a call is kept at
  // level L if a hash of its seq has at least L leading zero bits (one call
  // in 2^L, whichever its place in the run), and L rises by one whenever
  // the calls kept at it pass the limit (from then on between half the
  // limit and the limit). Those already held below L are dropped as the
  // records are read back (next()).
  static constexpr uint64_t kMaxLatencies = uint64_t{16} << 20;
  explicit MemoryMap(std::string scratch_dir = ".", size_t run = MemorySorter::kDefaultRun,
                     uint64_t max_latencies = kMaxLatencies)
      : sorter_(std::move(scratch_dir), run), max_latencies_(max_latencies) {}
  // What a region costs while any of it is mapped (its place behind which a
  // later resident count goes; a region wholly unmapped is dropped); from
  // 2^20 mapped at once on, each doubling is checked against the memory
  // available first (std::runtime_error). The records themselves are not
  // held (MemorySorter).
  static constexpr uint64_t kBytesPerRegion = 80;  // (an anchor, a count, a hash table node)
  static constexpr size_t kCheckedFrom = size_t{1} << 20;
  // `fixed`: MAP_FIXED, replacing what was mapped there (`pages` of it resident).
  void map(const MemoryPosition& at, uint64_t addr, uint64_t len, bool fixed, uint64_t pages = trace::kUnknownPages);
  void unmap(const MemoryPosition& at, uint64_t addr, uint64_t len, uint64_t pages);
  // `flags`: mremap's (MREMAP_DONTUNMAP leaves the old mapping, emptied).
  void remap(const MemoryPosition& at, uint64_t old, uint64_t old_len, uint64_t pages, uint64_t result,
             uint64_t new_len, unsigned flags = 0);
  void advise(const MemoryPosition& at, uint64_t addr, uint64_t len, bool lazy, uint64_t pages);
  // The break moved from `old` to `now` (`pages` resident in what a lower break released).
  void brk(const MemoryPosition& at, uint64_t old, uint64_t now, uint64_t pages);
  // `pages` of [addr, addr+len) resident (at exit); false if not a mapping.
  bool resident(uint64_t addr, uint64_t len, uint64_t pages);
  // A heap object's resident pages.
  void object(uint64_t id, uint64_t len, uint64_t pages);
  // Heap call `seq` took `ns` inside the allocator.
  void latency(uint64_t seq, uint32_t thread, uint64_t ns);

  // The records made, and then (after the last call) the records in trace
  // order, one at a time (a touch right after the event it is placed
  // behind, the objects' counts last by id); false at the end.
  uint64_t records() const { return sorter_.size() - latencies_thinned_; }
  bool next(trace::MemoryEvent& e);
  // Runs of records written to the scratch file (0: all were held).
  uint64_t runs_written() const { return sorter_.runs_written(); }
  // Their scratch file's disk at its largest (0: all were held).
  uint64_t scratch_peak_bytes() const { return sorter_.scratch_peak_bytes(); }
  const MemoryCounts& counts() const { return counts_; }
  // Bytes mapped now (the program's own mappings).
  uint64_t mapped() const { return mapped_; }

 private:
  struct Piece {
    uint64_t end;
    uint64_t region;
    uint64_t base;  // the region's start address: offsets are from here
  };
  // A region's latest event: where a resident count measured later goes
  // (right behind it, on its thread, at its time).
  struct Anchor {
    uint64_t after = 0, time = 0, order = 0;
    uint32_t thread = 0;
  };

  struct Region {
    Anchor last;
    uint64_t pieces = 0;  // of pieces_: none left, the region is dropped
  };
  // Applies `fn(piece start, piece, lo, hi)` to every piece overlapping [lo, hi).
  template <typename Fn>
  void overlapping(uint64_t lo, uint64_t hi, Fn fn);
  void cut(uint64_t lo, uint64_t hi);  // removes [lo, hi) from the pieces
  void release(const MemoryPosition& at, uint64_t addr, uint64_t len, uint64_t pages, trace::MemOp op);
  void touch(uint64_t region, uint64_t offset, uint64_t len, uint64_t pages);
  static uint64_t share_of(uint64_t& pages, uint64_t lo, uint64_t hi);
  Anchor push(const trace::MemoryEvent& e, uint64_t order);
  Anchor push(const trace::MemoryEvent& e);
  uint64_t add_region(const Anchor& a);  // its id
  void put_piece(uint64_t start, const Piece& p);
  static trace::MemoryEvent call(trace::MemOp op, const MemoryPosition& at, uint64_t region, uint64_t offset,
                                 uint64_t len, uint64_t pages);
  uint64_t new_region(const MemoryPosition& at, uint64_t addr, uint64_t len);

  std::map<uint64_t, Piece> pieces_;              // by start address, disjoint
  std::unordered_map<uint64_t, Region> regions_;  // the regions still mapped, by id
  uint64_t next_region_ = 1;
  uint64_t regions_high_ = 0;  // the most regions held at once (plus one)
  MemorySorter sorter_;        // the records, by (after, tie-break), the objects' last by id
  MemoryCounts counts_;
  uint64_t mapped_ = 0;
  // Timed calls held, by level (the leading zero bits of their seq's
  // hash); those below latency_level_ are dropped by next().
  static unsigned latency_level(uint64_t seq);
  uint64_t max_latencies_;
  unsigned latency_level_ = 0;
  uint64_t latencies_at_level_[65] = {};
  uint64_t latencies_thinned_ = 0;  // held, below latency_level_
};

}  // namespace heaplab::normalise
