// Reads a raw capture file (capture/shim/raw_format.h): validates the
// header, finds each thread's blocks and walks its records in order. The
// file is mapped read-only; nothing is copied, so memory stays proportional
// to the number of blocks, not events.
#pragma once

#include <cstdint>
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
  uint32_t slot = 0;  // the shim's thread slot
  uint64_t tid = 0;
  std::string name;              // from its last block
  std::vector<BlockRef> blocks;  // in thread_block_seq order
};

class RawFile {
 public:
  // Maps and validates `path` (PID.GEN.hlraw) and `path`.blocks beside it.
  // Throws RawError naming the path.
  explicit RawFile(const std::string& path);
  ~RawFile();
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  const std::string& path() const { return path_; }
  const raw::FileHeader& header() const { return *header_; }
  const std::vector<RawThread>& threads() const { return threads_; }
  std::vector<std::string> command_line() const;        // argv from the header
  uint64_t blocks() const { return blocks_; }           // blocks read
  uint64_t blocks_missing() const { return missing_; }  // gaps in a thread's block sequence
  bool clean_exit() const { return header_->flags & raw::kFlagCleanExit; }

  // Reads an appended block into buf (kBlockSize bytes). Throws RawError.
  void read_block(const BlockRef& b, uint8_t* buf) const;

  // TSC rate (ns per tick) from the clock pairs in the header and block
  // headers; 1.0 for the monotonic clock. 0 if there is no usable pair.
  double ns_per_tick() const;

 private:
  struct Mapping {
    const uint8_t* data = nullptr;
    uint64_t size = 0;
  };
  static Mapping map_file(const std::string& path);
  std::string path_;
  Mapping ring_;
  int appended_fd_ = -1;
  const raw::FileHeader* header_ = nullptr;
  std::vector<RawThread> threads_;
  uint64_t blocks_ = 0, missing_ = 0;
};

// Walks one thread's records across its blocks. Zero records inside a block
// that are followed by complete ones are holes: counted, skipped.
class RawThreadCursor {
 public:
  RawThreadCursor(const RawFile& f, const RawThread& t) : f_(&f), t_(&t), buf_(raw::kBlockSize) { load_block(); }
  // The next complete record, or nullptr at the end.
  const raw::Record* next();
  uint64_t holes() const { return holes_; }
  // Mapped blocks that changed while being read (the process was still running).
  uint64_t changed() const { return changed_; }

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
