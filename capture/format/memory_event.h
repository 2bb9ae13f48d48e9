// What a capture knows besides the heap calls (trace format 1.1, FORMAT.md
// section 15): the program's own anonymous mappings, how it released them,
// how many pages of large blocks and mappings it really had resident, and
// the time sampled calls took inside the allocator. Stored in one MEMX
// block, which 1.0 readers skip: they replay the heap calls alone.
// Depends on nothing but the C++ standard library.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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
// The same a record at a time, into `sink` as it goes: the header first,
// then the frame (declaring count x 72 bytes) a batch of records at a
// time. finish() ends it; fewer or more records than `count` throw
// std::logic_error.
class MemoryBlockEncoder {
 public:
  using Sink = void (*)(void* ctx, const char* data, size_t len);
  MemoryBlockEncoder(uint64_t count, Sink sink, void* ctx);
  ~MemoryBlockEncoder();
  MemoryBlockEncoder(const MemoryBlockEncoder&) = delete;
  MemoryBlockEncoder& operator=(const MemoryBlockEncoder&) = delete;
  void add(const MemoryEvent& e);
  void finish();

 private:
  void compress(bool last);
  struct Zstd;
  std::unique_ptr<Zstd> z_;
  Sink sink_;
  void* ctx_;
  uint64_t count_, added_ = 0;
  std::string raw_, out_;
};
// Decodes a MEMX payload whole; nullopt with `error` set if it is
// malformed. Records of ops this version does not know (a later minor's)
// are left out, as is a whole block of a later layout version. (Holds every
// record: for tests and small blocks. Readers use MemoryRecordStream.)
std::optional<std::vector<MemoryEvent>> decode_memory_events(std::string_view payload, std::string& error);

// A MEMX payload's records in order, decompressed a batch at a time: it
// holds about 2.5 MiB (zstd's window, 2 MiB as heaplab writes the block,
// and a batch of 72 KiB) however many records the block has; a frame that
// asks for a window over 16 MiB is refused as corrupt. Records of ops this version does not know are left out; a
// block of a later layout version has none. A malformed payload ends the
// stream with error() set: a header that does not add up is found at once,
// damaged data where it lies, and a frame that ends short of (or runs past)
// its declared size at the end.
class MemoryRecordStream {
 public:
  explicit MemoryRecordStream(std::string_view payload);
  ~MemoryRecordStream();
  MemoryRecordStream(const MemoryRecordStream&) = delete;
  MemoryRecordStream& operator=(const MemoryRecordStream&) = delete;
  // Up to `max` records into `out`; 0 at the end or on an error.
  size_t next(MemoryEvent* out, size_t max);
  const std::string& error() const { return error_; }
  // The records the header declares (of every op), 0 for a later layout.
  uint64_t declared() const { return declared_; }
  // Bytes of the payload read so far (a reader gives their pages back).
  size_t consumed() const { return 24 + in_pos_; }

 private:
  bool fill();  // decompresses the next batch of raw records into raw_
  void fail(const char* what);
  struct Zstd;
  Zstd* z_ = nullptr;
  std::string_view frame_;
  size_t in_pos_ = 0;
  uint64_t declared_ = 0, raw_left_ = 0;
  std::string raw_;
  size_t raw_pos_ = 0, raw_len_ = 0;
  bool ended_ = false;
  std::string error_;
};

// What a replay relies on, one record at a time, in the order written:
// regions mapped before use and numbered in order, offsets inside their
// regions, calls (and timed calls) in trace order, then the objects'
// resident counts by ascending object id (FORMAT.md section 15). "" or the
// problem. Holds about 48 bytes a region while any of it is mapped (held,
// with what a replay plan holds of one, against the memory available as
// they double), nothing a record.
class MemoryChecker {
 public:
  std::string check(const MemoryEvent& e);

 private:
  std::string new_region(uint64_t length);
  struct Region {
    uint64_t extent = 0, left = 0;  // bytes from its base it mapped; of them still mapped
  };
  std::unordered_map<uint64_t, Region> regions_;  // the regions still mapped
  uint64_t next_region_ = 1, regions_high_ = 0;
  uint64_t index_ = 0, last_after_ = 0, last_object_ = 0;
  bool objects_ = false;  // an object record has been seen
};
// The bytes the program has mapped, call after call (map and remap add,
// unmap and remap take away, never more than the region had), and their
// peak: the replay plan and `stats` both follow a trace's mappings with it.
// Holds a region while any of it is mapped.
class MappedBytes {
 public:
  void apply(const MemoryEvent& e);
  uint64_t now() const { return saturated(now_); }
  uint64_t peak() const { return peak_; }

 private:
  __extension__ typedef unsigned __int128 Wide;
  static uint64_t saturated(Wide v) { return v > UINT64_MAX ? UINT64_MAX : uint64_t(v); }
  std::unordered_map<uint64_t, uint64_t> length_;  // bytes still mapped, by region id
  Wide now_ = 0;
  uint64_t peak_ = 0;
};

// MemoryChecker over a whole list. "" or the problem.
std::string check_memory_events(const std::vector<MemoryEvent>& events);

}  // namespace heaplab::trace
