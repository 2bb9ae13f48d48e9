// Reads a raw capture file (capture/shim/raw_format.h): validates the
// header, finds each thread's blocks and walks its records in order. The
// file is mapped read-only; nothing is copied, so memory stays proportional
// to the number of blocks, not events.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "capture/shim/raw_format.h"

namespace heaplab::normalise {

// "PATH: what" for a raw file that cannot be read.
struct RawError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where one block is: in the mapping of the .hlraw file (a thread's current
// block), or at an offset of the .blocks file (read with pread, so memory
// stays one block per thread however long the capture).
struct BlockRef {
  raw::BlockHeader header;
  const uint8_t* mapped = nullptr;
  uint64_t offset = 0;
};

struct RawThread {
  uint32_t slot = 0;  // the shim's thread number (raw::BlockHeader::thread)
  uint64_t tid = 0;
  std::string name;              // from its last block
  std::vector<BlockRef> blocks;  // in thread_block_seq order
};

// Throws RawError ("PATH: what") unless `h` is a raw capture header this
// reader can read: magic, version, block layout, clock.
void check_header(const raw::FileHeader& h, const std::string& path);

// The program's argv from a raw file's header.
std::vector<std::string> argv_of(const raw::FileHeader& h);

// One thread's records, in order, as the normaliser takes them: from a
// finished raw file (RawThreadCursor) or from one still being written
// (raw_live.h).
class RecordCursor {
 public:
  virtual ~RecordCursor() = default;
  // The next complete record, or nullptr if there is none yet (none ever,
  // once ended()). The record stays valid until the next call.
  virtual const raw::Record* next() = 0;
  // No record will come after the last one returned.
  virtual bool ended() const = 0;
  // After next() returned nullptr: whether it returned every record the
  // thread had written when it last looked (so the thread's next record is
  // written after that), rather than waiting for a block not yet readable.
  virtual bool caught_up() const = 0;
  // Records lost inside blocks (zero records followed by complete ones).
  virtual uint64_t holes() const = 0;
  // Mapped blocks that changed while being read (the process was still running).
  virtual uint64_t changed() const = 0;
};

// What the normaliser reads: a finished raw file (RawFile), or one the
// process is still writing (raw_live.h).
class RecordSource {
 public:
  virtual ~RecordSource() = default;
  virtual const raw::FileHeader& header() const = 0;
  virtual std::vector<std::string> command_line() const = 0;
  virtual size_t thread_count() const = 0;  // grows while the process runs
  virtual std::unique_ptr<RecordCursor> cursor(size_t thread) = 0;
  virtual uint64_t thread_tid(size_t thread) const = 0;
  virtual std::string thread_name(size_t thread) const = 0;  // its latest
  virtual uint64_t blocks() const = 0;                       // blocks found so far
  virtual uint64_t blocks_missing() const = 0;               // gaps in a thread's block sequence
  virtual bool clean_exit() const = 0;
  // TSC rate (ns per tick); 1.0 for the monotonic clock; 0 if unknown.
  virtual double ns_per_tick() const = 0;
};

class RawFile final : public RecordSource {
 public:
  // Maps and validates `path` (PID.GEN.hlraw) and `path`.blocks beside it.
  // Throws RawError naming the path.
  explicit RawFile(const std::string& path);
  // A header alone, copied (kBlockSize bytes): a spare slot's, for a process
  // whose raw file could not be set up; no threads, no blocks. `label` names
  // it in errors. Throws RawError.
  RawFile(const std::string& label, const void* header_block);
  ~RawFile();
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  const std::string& path() const { return path_; }
  const raw::FileHeader& header() const override { return *header_; }
  const std::vector<RawThread>& threads() const { return threads_; }
  std::vector<std::string> command_line() const override;        // argv from the header
  uint64_t blocks() const override { return blocks_; }           // blocks read
  uint64_t blocks_missing() const override { return missing_; }  // gaps in a thread's block sequence
  bool clean_exit() const override { return header_->flags & raw::kFlagCleanExit; }
  size_t thread_count() const override { return threads_.size(); }
  std::unique_ptr<RecordCursor> cursor(size_t thread) override;
  uint64_t thread_tid(size_t thread) const override { return threads_[thread].tid; }
  std::string thread_name(size_t thread) const override { return threads_[thread].name; }

  // Reads an appended block into buf (kBlockSize bytes). Throws RawError.
  void read_block(const BlockRef& b, uint8_t* buf) const;

  // TSC rate (ns per tick) from the clock pairs in the header and block
  // headers; 1.0 for the monotonic clock. 0 if there is no usable pair.
  double ns_per_tick() const override;

 private:
  struct Mapping {
    const uint8_t* data = nullptr;
    uint64_t size = 0;
  };
  static Mapping map_file(const std::string& path);
  std::string path_;
  Mapping ring_;
  std::vector<uint8_t> owned_;  // the header block, when not mapped from a file
  int appended_fd_ = -1;
  const raw::FileHeader* header_ = nullptr;
  std::vector<RawThread> threads_;
  uint64_t blocks_ = 0, missing_ = 0;
};

// Walks one thread's records across its blocks. Zero records inside a block
// that are followed by complete ones are holes: counted, skipped.
class RawThreadCursor final : public RecordCursor {
 public:
  RawThreadCursor(const RawFile& f, const RawThread& t) : f_(&f), t_(&t), buf_(raw::kBlockSize) { load_block(); }
  // The next complete record, or nullptr at the end.
  const raw::Record* next() override;
  bool ended() const override { return true; }
  bool caught_up() const override { return true; }
  uint64_t holes() const override { return holes_; }
  uint64_t changed() const override { return changed_; }

 private:
  void load_block();
  const RawFile* f_;
  const RawThread* t_;
  std::vector<uint8_t> buf_;
  size_t block_ = 0;
  const raw::Record* cur_ = nullptr;
  const raw::Record* end_ = nullptr;
  uint64_t holes_ = 0;
  uint64_t changed_ = 0;
};

}  // namespace heaplab::normalise
