// Reader for .hlt traces: opens a file (memory-mapped) or a byte buffer,
// finds the chunks through the footer's index (or, for a truncated file, by
// scanning), and decodes events per thread or merged into global order.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_format.h"
#include "capture/format/trace_writer.h"

namespace heaplab::trace {

// An ADDR block (format 1.2): events first_seq .. first_seq + count - 1.
struct AddressBlockRef {
  uint64_t offset = 0;  // of the block header
  uint64_t first_seq = 0;
  uint32_t count = 0;
};

struct ChunkRef {
  uint64_t offset = 0;  // of the block header
  uint32_t thread = 0;
  uint32_t events = 0;
  uint64_t first_seq = 0, last_seq = 0, first_time = 0, last_time = 0;
};

class TraceReader {
 public:
  // Maps and opens `path`. Throws TraceError ("PATH: offset N: ...") when the
  // file is not a trace, has an unsupported major version, or is corrupt.
  static std::unique_ptr<TraceReader> open(const std::string& path);
  // Same over a caller-owned buffer that must outlive the reader.
  static std::unique_ptr<TraceReader> from_memory(std::string_view data, std::string name);
  ~TraceReader();

  const std::string& name() const { return name_; }
  // The file as it was opened (device, inode, size, modification time in
  // ns); all 0 for a reader over memory. Another command that hashes the
  // file by its name compares it, so that a file replaced or rewritten
  // meanwhile is not taken for the one read.
  struct FileStamp {
    uint64_t dev = 0, ino = 0, size = 0, mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };
  const FileStamp& file_stamp() const { return stamp_; }
  uint16_t major_version() const { return major_; }
  uint16_t minor_version() const { return minor_; }
  bool has_time() const { return has_time_; }
  uint64_t file_size() const { return data_.size(); }
  // Metadata JSON (the last complete METADATA block).
  const std::string& metadata() const { return metadata_; }
  // Thread table: the threads described by the writer, by ascending index.
  const std::vector<std::pair<uint32_t, ThreadInfo>>& thread_table() const { return threads_; }
  // A thread's description (empty if the table has none).
  const ThreadInfo& thread_info(uint32_t t) const;
  // Thread indices that have events, ascending; thread_count() is the
  // largest plus one (0 for an empty trace).
  const std::vector<uint32_t>& active_threads() const { return active_; }
  uint32_t thread_count() const { return active_.empty() ? 0 : active_.back() + 1; }
  const std::vector<ChunkRef>& chunks() const { return chunks_; }
  // Indices into chunks() of thread t's chunks, in order (empty if none).
  const std::vector<uint32_t>& thread_chunks(uint32_t t) const;
  uint64_t event_count() const { return events_; }
  uint64_t thread_event_count(uint32_t t) const;
  // The seq of thread t's thread_end event, or UINT64_MAX if its last
  // event is not one (or it has none). (Nothing follows a thread_end on its
  // thread, so only the last chunk says: each thread's is decoded once, at
  // the first call.)
  uint64_t thread_end_seq(uint32_t t) const;
  // False when the footer is missing: the file was cut short (e.g. the
  // capture died). warning() then says how much was readable and what is lost.
  bool complete() const { return complete_; }
  const std::string& warning() const { return warning_; }
  // The program's memory besides the heap calls (format 1.1): how many
  // records this reader knows (0 if the trace has none), in all and of one
  // op. Read them in order with a MemoryCursor, which never holds them all;
  // the reader checked every one when it opened the trace.
  uint64_t memory_event_count() const { return memory_count_; }
  uint64_t memory_event_count(MemOp op) const { return unsigned(op) <= kMemOpMax ? memory_ops_[unsigned(op)] : 0; }
  bool has_memory_events() const { return memory_count_ != 0; }
  // All of them at once (tests, small traces: 72 bytes a record).
  std::vector<MemoryEvent> read_memory_events() const;
  // The program's own calls (neither objects' counts nor timed calls) of
  // each recorded thread that made any, as found when the trace was opened:
  // planning a replay needs no pass of its own for them.
  struct ThreadMemoryCalls {
    uint64_t calls = 0, remaps = 0;
    uint64_t first_after = UINT64_MAX, last_after = 0;  // seqs
  };
  const std::map<uint32_t, ThreadMemoryCalls>& memory_calls_by_thread() const { return memory_threads_; }
  // The objects' resident counts that are known (not kUnknownPages).
  uint64_t memory_objects_with_pages() const { return memory_object_pages_; }
  // The MEMX block's payload as written (empty without one), to copy; only
  // where every record is of an op this version knows (else a copy would
  // carry a later minor's records in a file that does not say so).
  std::string_view memory_block() const { return memory_whole_ ? memory_block_ : std::string_view(); }
  // A replay's addresses (format 1.2, `heaplab replay --emit-trace`): the
  // ADDR blocks, by ascending seq (empty if the trace has none). Read them
  // with an AddressCursor.
  const std::vector<AddressBlockRef>& address_blocks() const { return addresses_; }
  bool has_addresses() const { return !addresses_.empty(); }
  // What reading the events in global order holds decoded at once: for each
  // thread, its largest chunk's decoded size (chunk headers' raw_size, at
  // most 64 MiB each). MergedCursor refuses more than the memory available.
  uint64_t decoded_bytes_at_once() const;

 private:
  TraceReader() = default;
  void load();
  void release_pages() const;
  void load_from_index(uint64_t index_offset, uint64_t total);
  void scan();
  void add_chunk(const ChunkRef& c);
  void finish_threads();
  [[noreturn]] void fail(uint64_t offset, const std::string& what) const;
  friend class ChunkDecoder;
  friend class AddressCursor;
  friend class MemoryCursor;

  std::string name_;
  FileStamp stamp_;
  std::string_view data_;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  uint16_t major_ = 0, minor_ = 0;
  bool has_time_ = false;
  bool complete_ = false;
  std::string warning_;
  std::string metadata_;
  std::vector<std::pair<uint32_t, ThreadInfo>> threads_;
  std::vector<ChunkRef> chunks_;
  // Chunk lists of the threads that have chunks, parallel to active_ (sorted
  // by finish_threads(); while loading, in order of first appearance).
  std::vector<uint32_t> active_;
  std::vector<std::vector<uint32_t>> lists_;
  std::unordered_map<uint32_t, uint32_t> loading_slot_;
  uint64_t events_ = 0;
  std::string_view memory_block_;  // the MEMX payload (of a layout this version reads)
  uint64_t memory_block_offset_ = 0;
  uint64_t memory_count_ = 0;
  uint64_t memory_ops_[kMemOpMax + 1] = {};
  uint64_t memory_object_pages_ = 0;
  bool memory_whole_ = false;  // every record of the block is of a known op
  std::map<uint32_t, ThreadMemoryCalls> memory_threads_;
  void load_memory(const uint8_t* payload, uint32_t len, uint64_t off);
  // Gives back the pages of the MEMX payload's bytes [from, to) once read.
  void release_memory_block(size_t from, size_t to) const;
  std::vector<AddressBlockRef> addresses_;
  mutable uint64_t decoded_at_once_ = UINT64_MAX;
  mutable std::once_flag ends_once_;
  mutable std::vector<uint64_t> end_seqs_;  // parallel to active_ (thread_end_seq)
  // Pages of decoded chunks to unmap from this process, a few at a time
  // (ChunkDecoder::start): merged ranges, given back once they add up to
  // kReleaseBatch or fill the list. (One madvise per chunk took more time
  // than decoding where threads write small chunks: 100,000 threads of 136
  // calls.)
  void release_later(uintptr_t lo, uintptr_t hi) const;
  mutable std::mutex release_mu_;
  mutable std::vector<std::pair<uintptr_t, uintptr_t>> to_release_;
  void add_address_block(const uint8_t* payload, uint32_t len, uint64_t off);
};

// Decodes one chunk incrementally. Verifies the chunk's checksum and header
// against the index, decompresses it, then hands out events in batches.
class ChunkDecoder {
 public:
  ChunkDecoder();
  ~ChunkDecoder();
  ChunkDecoder(const ChunkDecoder&) = delete;
  ChunkDecoder& operator=(const ChunkDecoder&) = delete;

  void start(const TraceReader& r, const ChunkRef& c);
  // Decodes up to `max` events into `out`; returns how many (0 at the end).
  size_t next(Event* out, size_t max);
  uint32_t remaining() const { return remaining_; }
  // Frees the decoded chunk (after the last event was handed out).
  void release() { std::vector<uint8_t>().swap(buf_); }

 private:
  [[noreturn]] void corrupt(const char* what) const;
  template <bool kSeq, bool kTime, bool kAux>
  static size_t decode(ChunkDecoder* d, Event* out, size_t n);
  using DecodeFn = size_t (*)(ChunkDecoder*, Event*, size_t);
  DecodeFn decode_ = nullptr;
  const TraceReader* r_ = nullptr;
  ChunkRef c_{};
  std::vector<uint8_t> buf_;
  const uint8_t* ops_ = nullptr;
  const uint8_t* p_[kColumnCount] = {};
  uint8_t width_[kColumnCount] = {};
  uint32_t remaining_ = 0;
  uint32_t thread_ = 0;
  bool has_time_ = false;
  uint64_t seq_next_ = 0, time_prev_ = 0, id_next_ = 0, ref_ = 0;
};

// The address of events by seq, one ADDR block decoded at a time (cheap
// when seqs come in order). 0 for an event without one. Throws TraceError
// for a damaged block.
// A stat(2) result as TraceReader::file_stamp() gives it.
TraceReader::FileStamp file_stamp_of(const struct stat& st);

class AddressCursor {
 public:
  explicit AddressCursor(const TraceReader& r) : r_(r) {}
  uint64_t at(uint64_t seq);

 private:
  const TraceReader& r_;
  size_t cur_ = SIZE_MAX;
  std::vector<uint64_t> block_;
};

// The trace's memory records (MEMX, format 1.1) in the order written,
// decompressed a batch at a time (MemoryRecordStream): a few hundred KiB
// however many there are, and the block's pages given back behind it.
// Throws TraceError if the block reads otherwise than when the reader
// checked it (the file changed since).
class MemoryCursor {
 public:
  explicit MemoryCursor(const TraceReader& r);
  // The next record, or nullptr at the end (valid until the next call).
  const MemoryEvent* peek() {
    if (pos_ == len_ && !refill()) return nullptr;
    return &buf_[pos_];
  }
  // The next record, moved past; nullptr at the end.
  const MemoryEvent* next() {
    const MemoryEvent* e = peek();
    if (e) ++pos_;
    return e;
  }

 private:
  bool refill();
  const TraceReader& r_;
  std::unique_ptr<MemoryRecordStream> in_;
  std::vector<MemoryEvent> buf_;
  size_t pos_ = 0, len_ = 0, released_ = 0;
};

// Source of events in batches.
class EventCursor {
 public:
  virtual ~EventCursor() = default;
  // Fills up to `max` events; returns 0 when there are no more.
  virtual size_t next(Event* out, size_t max) = 0;
};

// Events of one thread, in order.
class ThreadCursor final : public EventCursor {
 public:
  ThreadCursor(const TraceReader& r, uint32_t thread);
  size_t next(Event* out, size_t max) override;

 private:
  const TraceReader& r_;
  const std::vector<uint32_t>& chunks_;
  size_t pos_ = 0;
  ChunkDecoder dec_;
};

// All events in global (seq) order, merged across threads.
class MergedCursor final : public EventCursor {
 public:
  explicit MergedCursor(const TraceReader& r);
  size_t next(Event* out, size_t max) override;

 private:
  struct Source {
    std::unique_ptr<ThreadCursor> cursor;
    std::vector<Event> buf;
    size_t pos = 0, len = 0;
  };
  bool refill(Source& s);
  std::vector<Source> sources_;
  std::vector<uint32_t> heap_;  // indices into sources_, min-heap by head seq
  bool started_ = false;
};

}  // namespace heaplab::trace
