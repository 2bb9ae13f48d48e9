// Reads a raw capture (capture/shim/raw_format.h) while the process is
// still writing it, for `heaplab capture`'s normalising as the program runs.
//
// poll() looks at what the process has written: the header's counters, the
// appended blocks not seen before, and the header of every thread slot's
// current block. A thread's cursor then reads its records in order: a block
// the thread has moved past from .blocks (a block is appended before its
// thread starts the next one), its current block from the shared mapping,
// record by record up to the first one not yet written. Appended blocks
// whose records were all returned are consumed: their disk space is given
// back (fallocate's hole punching) and counted in the header, where the
// shim waits while raw::live_ahead_blocks are unconsumed. Blocks the shim
// left in the mapping instead (no copy, raw::FreeBlocks) are read there,
// zeroed and given back to be written again, and the shim takes no more
// slots than raw::live_slots_at_most (but for a few when threads start
// together, and past it when this reader stalls for 10 s). A thread's last
// block is read whole and given back too once the kernel has marked the
// thread gone (raw::BlockHeader::exit_word; the shim stopped counting the
// thread as running as it began to end). So scratch disk stays
// within about 64 MiB with up to 832 threads running at once, however many
// come and go (the mapping never shrinks), and grows by a block per
// running thread beyond. (Ended threads give their block back only where
// the shim could link its exit node: glibc's robust list layout, and a
// thread-specific key among glibc's first 32; else they keep it.) A thread
// found gone ends its stream once its last block is read.
//
// finish(), once the process image has ended, reads everything left as
// RawFile would: holes counted, gaps in a thread's blocks skipped.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "capture/format/flat_map.h"
#include "capture/normalise/raw_reader.h"

namespace heaplab::normalise {

// For a raw file no live reader will open (heaplab capture could not start
// one, or has stopped looking for new files): marks it as if one had
// (raw::FileHeader::reader_started) and wakes the threads that wait, so that
// the shim appends on without a bound instead of waiting 10 s. False if the
// file has no valid header yet.
bool release_waiting_shim(const std::string& path);

class LiveRawFile final : public RecordSource {
 public:
  // Opens PATH and PATH.blocks. Throws RawError if the header is not valid
  // (yet: the shim writes its magic last) or not readable by this reader.
  // `consume`: give consumed blocks' disk space back and hold the shim to
  // raw::live_ahead_blocks (else the raw files stay whole: --keep-raw).
  LiveRawFile(const std::string& path, bool consume);
  ~LiveRawFile() override;
  LiveRawFile(const LiveRawFile&) = delete;
  LiveRawFile& operator=(const LiveRawFile&) = delete;

  // Looks at what the process has written since the last poll; returns the
  // file's clock (TSC ticks or monotonic ns) read before looking: a record
  // a caught-up cursor has not returned yet is written after it.
  uint64_t poll();
  // Tells the shim a reader consumes (its heartbeat; poll() does it too):
  // a thread with a full block then leaves it in the mapping, or waits,
  // instead of appending it to .blocks. Set from the start, and while the
  // reader waits before its first poll.
  void beat();
  // The process image has ended: everything is read as final.
  void finish();
  bool finished() const { return final_; }
  // Whether it consumes (and so finds threads gone by their exit nodes).
  bool consuming() const { return consume_; }
  // The file's clock now.
  uint64_t now() const;
  // Consumed blocks' space could not be given back (a file system without
  // hole punching): "" or why.
  const std::string& punch_error() const { return punch_error_; }
  uint64_t blocks_consumed() const { return consumed_; }
  // Blocks the process has appended (or left in the mapping, and the last
  // of threads found gone) that this reader has not consumed yet (as of
  // now; with `consume` off, 0: nothing holds the process back).
  uint64_t unconsumed() const;
  // How many may wait before the shim holds the program back
  // (raw::live_ahead_blocks of its running threads).
  uint64_t ahead_limit() const;
  // Threads found gone while the process ran (their last block read whole
  // and, but for one with holes, given back; or, found late, read at the end).
  uint64_t threads_gone() const { return threads_gone_; }
  // The cursors' block buffers (64 KiB each) taken and not given back: a
  // thread's cursor holds one while it reads, and gives it back once its
  // thread has ended, or has written nothing new for the idle limit (200
  // ms, or set_idle_limit(); as poll() saw time pass) with every record
  // copied returned (a program's idle threads cost the reader nothing but
  // the few words of its place in their block), or when the cursor goes.
  uint64_t buffers_held() const { return buffers_held_; }
  void set_idle_limit(std::chrono::nanoseconds limit) { idle_limit_ = limit; }

  const raw::FileHeader& header() const override { return *header_; }
  std::vector<std::string> command_line() const override;
  size_t thread_count() const override { return threads_.size(); }
  std::unique_ptr<RecordCursor> cursor(size_t thread) override;
  uint64_t thread_tid(size_t thread) const override { return threads_[thread].tid; }
  std::string thread_name(size_t thread) const override { return threads_[thread].name; }
  uint64_t blocks() const override { return blocks_; }
  uint64_t blocks_missing() const override { return missing_; }
  bool clean_exit() const override;
  // From the header's clock pair to one taken now (0 while under 20 ms
  // apart): more exact the longer the process has run.
  double ns_per_tick() const override;

 private:
  friend class LiveCursor;
  struct Slot {  // a block in the mapping, as last polled
    uint64_t seq;
    uint32_t index;
  };
  struct Thread {
    uint64_t tid = 0;
    std::string name;
    struct Blocks {
      std::map<uint64_t, uint64_t> appended;  // seq -> offset in .blocks, not yet consumed
      std::vector<Slot> mapped;               // its blocks in the mapping, as last polled
    };
    // Made when a block of the thread is first indexed, polled or looked
    // for; freed once it has gone and its cursor has read its last block (a
    // program that runs threads over and over keeps the few words above for
    // each that has gone). blocks() makes it again if a block turns up
    // after all.
    std::unique_ptr<Blocks> held;
    Blocks& blocks() {
      if (!held) held = std::make_unique<Blocks>();
      return *held;
    }
    uint64_t top_seq = 0;   // the highest seq seen anywhere
    uint64_t next_seq = 0;  // the cursor's block
    bool seen = false;
    bool gone = false;  // ended in its block top_seq (note_gone)
  };
  const uint8_t* slot_block(uint32_t index) const { return ring_ + raw::kBlockSize * (index + 1); }
  bool read_header(const uint8_t* block, raw::BlockHeader* out) const;
  void note_block(const raw::BlockHeader& h);
  void index_appended(uint64_t upto);
  void map_ring();
  void consume(uint64_t offset);
  // Block slot `index`, read whole from the mapping: zeroed and given back
  // to the shim (raw::FreeBlocks), and counted as consumed.
  // (`records`: how far to zero its records; every record from there on
  // must have been read with a zero head, and can be written by no thread.)
  void give_back(uint32_t index, uint64_t records = raw::kRecordsPerBlock);
  // A cursor's block buffer: a spare one (a program whose threads come and
  // go would otherwise allocate and zero 64 KiB for every thread), or new.
  // Each a mapping of its own (LineAllocator: 64 KiB), so one given back
  // beyond the spares leaves the process, not a hole in malloc's arenas;
  // not zeroed (no reader looks below what was copied into it), so only the
  // pages records are copied to are ever touched.
  template <typename T>
  struct UnzeroedAllocator : LineAllocator<T> {
    template <typename U>
    struct rebind {
      using other = UnzeroedAllocator<U>;
    };
    template <typename U>
    void construct(U* p) noexcept {
      ::new (static_cast<void*>(p)) U;  // default-initialised: left as it is
    }
  };
  using Buffer = std::vector<uint8_t, UnzeroedAllocator<uint8_t>>;
  Buffer take_buffer();
  void put_buffer(Buffer&& buf);
  static constexpr size_t kSpareBuffers = 16;  // 1 MiB kept at most
  std::vector<Buffer> spare_buffers_;
  uint64_t buffers_held_ = 0;
  std::chrono::nanoseconds idle_limit_ = std::chrono::milliseconds(200);
  std::chrono::steady_clock::time_point polled_at_;  // when poll() last looked (the cursors' idle clock)
  // The block's exit word (raw::BlockHeader::exit_word): with
  // raw::kExitOwnerDied, the thread whose block it is has gone.
  static uint32_t exit_word(const uint8_t* block);
  raw::FreeBlocks* free_blocks() const {
    return reinterpret_cast<raw::FreeBlocks*>(reinterpret_cast<char*>(header_) + raw::kFreeBlocksOffset);
  }
  void note_gone(uint32_t thread);
  // A block counted as consumed (the shim may take another) without being
  // given back.
  void count_consumed();
  void read_appended(uint64_t offset, uint8_t* buf) const;
  void open();
  void release();
  void wake_waiters();

  std::string path_;
  bool consume_ = false, final_ = false;
  bool heartbeat_ = false;  // consumer_ns was set: cleared when done
  int fd_ = -1, blocks_fd_ = -1;
  raw::FileHeader* header_ = nullptr;  // its own writable mapping (the heartbeat and consumed count)
  const uint8_t* ring_ = nullptr;
  uint64_t ring_size_ = 0;
  uint32_t slots_ = 0;                // slots the ring mapping covers
  uint64_t scanned_ = 0;              // appended blocks indexed
  std::vector<uint64_t> unreadable_;  // appended blocks whose header was not written yet
  std::vector<Thread> threads_;       // by thread number (raw::thread_numbers)
  std::vector<uint32_t> polled_;      // the threads poll() gave mapped blocks (cleared at the next)
  struct InPlace {                    // a full block a cursor read in the mapping
    uint32_t thread;
    uint64_t seq;
    uint32_t index;
  };
  std::vector<InPlace> read_in_place_;
  uint64_t blocks_ = 0, missing_ = 0, consumed_ = 0, threads_gone_ = 0;
  uint64_t given_back_ = 0;  // blocks given back (raw::thread_numbers)
  std::string punch_error_;
};

}  // namespace heaplab::normalise
