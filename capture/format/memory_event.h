// What a capture knows besides the heap calls (trace format 1.1, FORMAT.md
// section 15): the program's own anonymous mappings, how it released them,
// how many pages of large blocks and mappings it really had resident, and
// the time sampled calls took inside the allocator. Stored in one MEMX
// block, which 1.0 readers skip: they replay the heap calls alone.
// Depends on nothing but the C++ standard library.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace heaplab::trace {

enum class MemOp : uint8_t {
  map = 1,        // mmap of anonymous private memory: new `region` of `length` bytes
  unmap = 2,      // munmap of [offset, offset+length) of `region`; `pages` were resident
  remap = 3,      // mremap of [offset, offset+length) of `region` (`pages` resident) to
                  //   `new_region` of `new_length` bytes
  dontneed = 4,   // madvise(MADV_DONTNEED) of [offset, offset+length) of `region`
  lazy_free = 5,  // madvise(MADV_FREE) of the same
  touch = 6,      // `pages` pages of [offset, offset+length) of `region` were written by now
  object = 7,     // heap object `region` had `pages` pages resident when released or at exit
                  //   (`length` bytes measured); `after`, `thread` and `time` are 0
  latency = 8,    // heap call `after` (its seq) took `length` ns inside the allocator, timed in the
                  //   program by the shim (one call in N, `heaplab capture --latency N`)
};
inline constexpr unsigned kMemOpMax = 8;
inline constexpr uint64_t kUnknownPages = 0xffffffffu;

// One record. A call happens between heap events `after - 1` and `after` of
// the global order (seq), on `thread`. Region ids are dense: 1, 2, 3 ... in
// order of mapping, never reused.
struct MemoryEvent {
  MemOp op = MemOp::map;
  uint32_t thread = 0;
  uint64_t after = 0;
  uint64_t time = 0;
  uint64_t region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t pages = 0;
  uint64_t new_region = 0;
  uint64_t new_length = 0;
  bool operator==(const MemoryEvent&) const = default;
};

inline constexpr size_t kMemoryRecordSize = 72;

std::string_view mem_op_name(MemOp op);

// MEMX payload: u32 version (1), u32 record size (72), u64 count, u64 raw
// bytes (= count * 72), then one zstd frame of the records, each: u8 op,
// 3 zero bytes, u32 thread, then u64 after, time, region, offset, length,
// pages, new_region, new_length.
std::string encode_memory_events(const std::vector<MemoryEvent>& events);
// Decodes a MEMX payload; nullopt with `error` set if it is malformed.
// Records of ops this version does not know (a later minor's) are left out,
// as is a whole block of a later layout version.
std::optional<std::vector<MemoryEvent>> decode_memory_events(std::string_view payload, std::string& error);
// The bytes the program has mapped, call after call (map and remap add,
// unmap and remap take away, never more than the region had), and their
// peak: the replay plan and `stats` both follow a trace's mappings with it.
class MappedBytes {
 public:
  void apply(const MemoryEvent& e);
  uint64_t now() const { return saturated(now_); }
  uint64_t peak() const { return peak_; }

 private:
  __extension__ typedef unsigned __int128 Wide;
  static uint64_t saturated(Wide v) { return v > UINT64_MAX ? UINT64_MAX : uint64_t(v); }
  uint64_t& length(uint64_t region);
  std::vector<uint64_t> length_;  // by region id
  Wide now_ = 0;
  uint64_t peak_ = 0;
};

// What a replay relies on: regions mapped before use and numbered in order,
// offsets inside their regions, calls in trace order. "" or the problem.
std::string check_memory_events(const std::vector<MemoryEvent>& events);

}  // namespace heaplab::trace
