// Streaming writer for .hlt traces. Events are appended in global order; the
// writer assigns `seq` and the ids of produced objects, keeps one open chunk
// per thread and appends each full chunk to the file, so a capture that dies
// leaves every flushed chunk readable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <string>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/memory_event.h"
#include "capture/format/trace_format.h"

namespace heaplab::trace {

struct WriterOptions {
  // Events per chunk per thread (1 .. 1<<20). Larger chunks compress better.
  uint32_t chunk_events = 65536;
  // How chunks are compressed: zstd (compact), lz4 (fastest to read and
  // write) or none.
  Codec codec = kCodecZstd;
  // zstd level (1..22) or lz4 acceleration level (1 = default, higher is faster).
  int level = 3;
  // Whether events carry timestamps (Event::time). Without, time is stored as 0.
  bool timestamps = false;
  // JSON object describing the trace, written as the first METADATA block.
  std::string metadata_json = "{}";
  // Whether to count the live heap's peak as events are appended
  // (heap_live_peak()): the requested bytes of the objects live at once, as
  // plan building counts them. Costs an IdMap: a ring of 4 MiB for the
  // 2^18 newest ids, and for an object still live behind them a
  // SplitFlatMap entry (21-43 B; for a moment 64 B while its table is one
  // that doubles, under about 786K entries, and at its split into 16 parts
  // that then double alone); for writers that do not count it
  // themselves (the importers).
  bool count_heap_peak = false;
};

struct ThreadInfo {
  uint64_t os_tid = 0;  // the kernel's thread id, 0 if unknown
  std::string name;     // thread name, may be empty
  bool operator==(const ThreadInfo&) const = default;
};

class TraceWriter {
 public:
  // Creates (truncates) `path`. Throws TraceError naming the path on failure.
  TraceWriter(const std::string& path, WriterOptions options);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Appends one event. Sets e.seq and, for a producing op without
  // kNullResult/kFailed, e.id (the next dense id); zeroes fields the op does
  // not carry. Returns e.id. Throws TraceError if e.op is invalid or e.old
  // names an object that does not exist yet.
  uint64_t append(Event& e);

  // Describes a thread index (may be called at any time before close()).
  void set_thread_info(uint32_t thread, ThreadInfo info);
  // Replaces the metadata; written as a final METADATA block by close().
  void set_final_metadata(std::string json);
  // The program's memory besides the heap calls: written by close() as a
  // MEMX block after the last chunk (the file is then version 1.1).
  void set_memory_events(std::vector<MemoryEvent> events);
  // Or another trace's MEMX block as it is (TraceReader::memory_block),
  // copied by close() without being held: it must stay valid until then.
  void copy_memory_block(std::string_view payload);
  // Or `count` records that `next` hands out in order (false: none left)
  // when close() writes the block, encoded as they come: none held here.
  void set_memory_source(uint64_t count, std::function<bool(MemoryEvent&)> next);
  // The address of each event, by seq (0: none): written by close() as ADDR
  // blocks after the MEMX block (the file is then version 1.2).
  void set_addresses(std::vector<uint64_t> by_seq);
  // The compression level of the chunks written from now on (as
  // WriterOptions::level; a chunk is one compressed frame, so a trace may
  // mix levels). Throws TraceError naming the path if out of range.
  void set_level(int level);
  // Throws that TraceError if `level` is out of range for this codec.
  void check_level(int level) const;
  // Events in the chunks written so far at compression level `level`.
  uint64_t events_at_level(int level) const;
  // Writes every open chunk, so that all events so far survive a crash.
  void flush();
  // Flushes, writes the thread table, index and footer. Throws on I/O errors.
  void close();

  uint64_t events() const;
  uint64_t objects() const;  // ids handed out so far
  // The most requested bytes live at once so far, and the most objects
  // (count_heap_peak; else 0).
  uint64_t heap_live_peak() const;
  uint64_t live_objects_peak() const;
  // Threads the writer keeps encoder state for: those with events but no
  // thread_end yet (a thread_end writes the thread's open chunk and frees
  // its state; an event of it after that starts afresh).
  size_t open_threads() const;
  uint64_t bytes_written() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace heaplab::trace
