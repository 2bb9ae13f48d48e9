#include "capture/normalise/raw_live.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace heaplab::normalise {

using namespace heaplab::raw;

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw RawError(path + ": " + what); }

uint64_t mono_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// Orders the loads before it ahead of those after it. (The other side is
// another process; GCC's thread sanitizer takes no fences, and has nothing
// of that process to check against.)
inline void acquire_fence() {
#if !defined(__SANITIZE_THREAD__)
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

template <typename T>
T acquire(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

// A block left in the mapping whose thread moved on without appending it
// (the shim's switch_block: a signal handler interrupted a write) fills up
// when the interrupted write completes; after this long, what is still
// missing is taken for holes (the thread died meanwhile).
constexpr std::chrono::seconds kStuckLimit{1};
// A thread's current block whose first record not yet written has a written
// one after it (a signal handler interrupted the write and recorded its own
// calls): the thread is held (not caught up) until it is written, or this
// long; then it is taken for a hole and the records after it are read. (Not
// as long as kStuckLimit: while one thread is held nothing is consumed, and
// a handler waiting for a block given back would wait as long.)
constexpr std::chrono::milliseconds kPendingLimit{100};
// How far past the first unwritten record a written one is looked for.
constexpr uint64_t kPendingLookahead = 4;

// Marks the file opened by a reader (raw::FileHeader::reader_started) and
// wakes the shim's threads that sleep on the mark (its low half).
void mark_opened(FileHeader* h) {
  __atomic_store_n(&h->reader_started, uint64_t{1}, __ATOMIC_RELEASE);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->reader_started), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

// A thread's records as far as they are written (raw_live.h).
class LiveCursor final : public RecordCursor {
 public:
  LiveCursor(LiveRawFile& f, size_t thread) : f_(&f), thread_(uint32_t(thread)) {}
  ~LiveCursor() override { f_->put_buffer(std::move(buf_)); }  // (the file outlives its cursors)
  LiveCursor(const LiveCursor&) = delete;
  LiveCursor& operator=(const LiveCursor&) = delete;

  const Record* next() override {
    for (;;) {
      if (pos_ < n_) {
        const Record* r = records() + pos_;
        if (r->head != 0) {
          ++pos_;
          return r;
        }
        // Zero records followed by complete ones (only in a final block): holes.
        uint64_t z = pos_;
        while (z < n_ && records()[z].head == 0) ++z;
        holes_ += z - pos_;
        pos_ = z;
        continue;
      }
      if (done_with_block_) {
        next_block();
        continue;
      }
      if (!load()) return nullptr;
      idle_since_.reset();
    }
  }
  bool ended() const override { return ended_; }
  bool caught_up() const override { return caught_up_; }
  uint64_t holes() const override { return holes_; }
  uint64_t changed() const override { return 0; }

 private:
  const Record* records() const { return reinterpret_cast<const Record*>(buf_.data() + kBlockHeaderSize); }
  Record* records() { return reinterpret_cast<Record*>(buf_.data() + kBlockHeaderSize); }
  LiveRawFile::Thread& t() { return f_->threads_[thread_]; }

  void next_block() {
    LiveRawFile::Thread& th = t();
    if (th.held) {
      auto& appended = th.held->appended;
      if (auto it = appended.find(seq_); it != appended.end()) {
        f_->consume(it->second);
        appended.erase(it);
      }
    }
    if (release_ != kNoSlot) {  // read whole from the mapping: zeroed and given back
      f_->give_back(release_, release_records_);
      release_ = kNoSlot;
    }
    ++seq_;
    th.next_seq = seq_;
    holes_before_ = holes_;
    pos_ = n_ = 0;
    done_with_block_ = false;
    stuck_since_.reset();
    pending_since_.reset();
    passed_pending_ = false;
  }

  // More records of block seq_ into buf_ (beyond n_). False if there are
  // none now; sets caught_up_ and ended_.
  bool load() {
    LiveRawFile::Thread& th = t();
    const bool final = f_->final_;
    // A number no thread has (yet; or a slot's, from a shim that numbered
    // threads by their first slot) has nothing to read, and no buffer.
    if (!th.seen) {
      ended_ = final;
      caught_up_ = true;
      return false;
    }
    // A thread gone, its last block read: nothing more will come. Its buffer
    // goes (a program whose threads come and go would keep one for every
    // thread it ran).
    if (th.gone && seq_ > th.top_seq && !final) {
      ended_ = caught_up_ = true;
      f_->put_buffer(std::move(buf_));
      th.held.reset();
      return false;
    }
    const bool moved_on = final || th.top_seq > seq_;
    LiveRawFile::Thread::Blocks& blocks = th.blocks();
    const LiveRawFile::Slot* slot = nullptr;
    for (const LiveRawFile::Slot& s : blocks.mapped)
      if (s.seq == seq_) slot = &s;
    auto app = blocks.appended.find(seq_);
    // A block the thread moved past was appended whole before it moved on;
    // at the end, a mapped copy of the same seq is the complete one (the
    // append may have been cut short).
    // (The buffer only once there is a record to copy: a thread that ended
    // has none, and an idle thread's cursor gave its back.)
    if (app != blocks.appended.end() && moved_on && !(final && slot)) {
      if (buf_.empty()) buf_ = f_->take_buffer();
      f_->read_appended(app->second, buf_.data());
      BlockHeader h;
      std::memcpy(&h, buf_.data(), sizeof h);
      if (h.magic == kBlockMagic && h.thread == thread_ && h.thread_block_seq == seq_) {
        n_ = kRecordsPerBlock;
        done_with_block_ = true;  // once its records are returned
        return pos_ < n_;
      }
      blocks.appended.erase(app);  // rewritten since it was indexed: not this block
      return load();
    }
    if (slot) {
      const uint8_t* block = f_->slot_block(slot->index);
      const auto* src = reinterpret_cast<const Record*>(block + kBlockHeaderSize);
      // Its thread has gone (the kernel marked the exit word after the
      // thread's last store): read before the records. Pinned: the word
      // still names a thread whose exit node could not be taken out of its
      // list (raw::BlockHeader::exit_word): never given back until marked.
      const uint32_t exit = f_->consume_ ? LiveRawFile::exit_word(block) : 0;
      const bool ended = exit & kExitOwnerDied;
      const bool pinned = exit != 0 && !ended;
      uint64_t n = n_;
      uint64_t last = n_;    // one past the last complete record copied
      uint64_t missing = 0;  // records copied that are not written
      uint64_t gaps = 0;     // of them, those before `last`
      // A record held for past kPendingLimit: read past as a hole.
      const bool give_up = pending_since_ && pending_slot_ == n_ && !moved_on && !ended &&
                           std::chrono::steady_clock::now() - *pending_since_ >= kPendingLimit;
      if (give_up) passed_pending_ = true;
      for (; n < kRecordsPerBlock; ++n) {
        const uint64_t head = acquire(&src[n].head);
        if (head == 0 && !moved_on && !ended && !(give_up && n == n_)) break;
        if (buf_.empty()) [[unlikely]]
          buf_ = f_->take_buffer();
        Record& r = records()[n];
        r.a = src[n].a;
        r.b = src[n].b;
        r.c = src[n].c;
        r.head = head;
        if (head) {
          last = n + 1;
          gaps = missing;
        } else {
          ++missing;
        }
      }
      // The first record not yet written has a written one after it: a
      // signal handler interrupted the thread between reserving a record and
      // writing it, and wrote its own records next. The interrupted one is
      // stamped no later than the handler's first (sink.h,
      // publish_after_handler), so the thread is not caught up to the poll
      // until it is written (kPendingLimit at most).
      // (The next few slots: a handler interrupted in turn by another, before
      // writing its first record, leaves two unwritten in a row.)
      bool pending = false;
      if (!moved_on && !ended)
        for (uint64_t k = n + 1; k < std::min(n + 1 + kPendingLookahead, kRecordsPerBlock) && !pending; ++k)
          pending = acquire(&src[k].head) != 0;
      if (!pending) {
        pending_since_.reset();
      } else if (!pending_since_ || pending_slot_ != n) {  // (a new one: its own time)
        pending_since_ = std::chrono::steady_clock::now();
        pending_slot_ = n;
      }
      // Still the block we meant (the shim clears the magic first when it reuses one)?
      acquire_fence();
      BlockHeader h;
      if (!f_->read_header(block, &h) || h.thread != thread_ || h.thread_block_seq != seq_) {
        caught_up_ = false;  // it moved on since the poll: the next poll finds the appended copy
        return false;
      }
      if (moved_on || ended) {
        // Left in the mapping: complete when every record is written, or at
        // the end, or at once if its thread ended in it (its tail is unused).
        // (A record reserved before a signal handler filled the block and
        // moved the thread on is written once the handler returns.)
        if ((last < kRecordsPerBlock || missing > 0) && !final && !ended) {
          if (!stuck_since_) stuck_since_ = std::chrono::steady_clock::now();
          if (std::chrono::steady_clock::now() - *stuck_since_ < kStuckLimit) {
            caught_up_ = false;
            return false;
          }
        }
        // Every record of it was written (and copied, from records n_ on:
        // those before were whole when copied): nothing can write there
        // again, so the block goes back to the shim once returned. One left
        // with holes stays as it is (a write may yet come).
        // (At the end nobody takes blocks, and one both appended and mapped
        // is counted when its appended copy is.)
        if (!final && (ended ? gaps == 0 : last == kRecordsPerBlock && missing == 0) && holes_before_ == holes_ &&
            !passed_pending_) {
          if (pinned)  // (given back by poll() once the kernel has marked it)
            f_->read_in_place_.push_back(LiveRawFile::InPlace{thread_, seq_, slot->index});
          else {
            release_ = slot->index;
            // Every record from `last` on was scanned with a zero head (an
            // ended thread's block is read to its end), or none is left.
            release_records_ = last;
          }
        }
        if (ended) {
          // The block its thread ended in (not one it was pinned to before).
          if (seq_ == th.top_seq && !final) f_->note_gone(thread_);
          // (With holes it stays where it is, but is done with.)
          if (release_ == kNoSlot && !final) f_->count_consumed();
        }
        n_ = last;
        done_with_block_ = true;
        return true;
      }
      const bool more = n > n_;
      n_ = n;
      if (n_ == kRecordsPerBlock) {
        // Full: the thread appends it next (then consumed when indexed),
        // or, with no copy, leaves it here and moves on: given back then,
        // or now if it is marked left (its thread waits for a block).
        done_with_block_ = true;
        // (One read past a record still to be written stays as it is: the
        // write may yet come.)
        if (f_->consume_ && !passed_pending_) {
          if (acquire(&reinterpret_cast<const BlockHeader*>(block)->left) == kBlockLeftFull) {
            release_ = slot->index;
            release_records_ = kRecordsPerBlock;
          } else {
            f_->read_in_place_.push_back(LiveRawFile::InPlace{thread_, seq_, slot->index});
          }
        }
      }
      if (more) return true;
      caught_up_ = !pending;
      return idle();
    }
    if (final) {
      // Not anywhere: a gap (the process died while appending), or the end.
      uint64_t next = UINT64_MAX;
      for (const auto& [seq, off] : blocks.appended)
        if (seq > seq_) next = std::min(next, seq);
      for (const LiveRawFile::Slot& s : blocks.mapped)
        if (s.seq > seq_) next = std::min(next, s.seq);
      if (next == UINT64_MAX) {
        ended_ = true;
        caught_up_ = true;
        return false;
      }
      f_->missing_ += next - seq_;
      seq_ = next - 1;
      next_block();
      return true;
    }
    // Block seq_ was not started when the poll looked (the thread is
    // appending its last one, or waiting for us to consume): its records are
    // stamped after the poll (the shim stamps a record once it has its
    // place). Unless the poll saw it before, or the thread past it: then it
    // is being appended, or was appended and not indexed yet (the next poll
    // finds it), with records stamped before the poll that this cursor has
    // not read (a thread that filled its block while the reader was behind).
    caught_up_ = th.top_seq < seq_;
    return idle();
  }

  // Nothing new to read: once the thread has been idle for the file's idle
  // limit, the buffer goes back (every record copied into it was returned,
  // and the one last returned is done with: the stream asked for the next).
  // Another is taken when the thread writes again; records are copied into
  // it at their place in the block, as before. Returns false (load's).
  bool idle() {
    if (buf_.empty() || pos_ < n_) return false;
    const auto now = f_->polled_at_;
    if (!idle_since_) {
      idle_since_ = now;
    } else if (now - *idle_since_ >= f_->idle_limit_) {
      f_->put_buffer(std::move(buf_));
      idle_since_.reset();
    }
    return false;
  }

  LiveRawFile* f_;
  uint32_t thread_;
  LiveRawFile::Buffer buf_;
  uint64_t seq_ = 0;
  uint64_t pos_ = 0, n_ = 0;  // records returned, records copied, of block seq_
  bool done_with_block_ = false;
  bool ended_ = false, caught_up_ = true;
  uint64_t holes_ = 0;
  uint64_t holes_before_ = 0;  // holes_ when block seq_ was started
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  uint32_t release_ = kNoSlot;                   // block seq_'s slot, to give back once returned
  uint64_t release_records_ = kRecordsPerBlock;  // and how far its records are to be zeroed
  std::optional<std::chrono::steady_clock::time_point> stuck_since_;
  // Since when the thread has written nothing new, every record copied
  // returned (idle()).
  std::optional<std::chrono::steady_clock::time_point> idle_since_;
  // Since when record pending_slot_ of block seq_ is held (kPendingLimit).
  std::optional<std::chrono::steady_clock::time_point> pending_since_;
  uint64_t pending_slot_ = 0;
  bool passed_pending_ = false;  // block seq_ was read past a held record
};

LiveRawFile::LiveRawFile(const std::string& path, bool consume) : path_(path), consume_(consume) {
  try {
    open();
  } catch (...) {
    release();  // (no destructor runs for a constructor that throws)
    throw;
  }
}

void LiveRawFile::open() {
  const std::string& path = path_;
  fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) fail(path, std::strerror(errno));
  struct stat st;
  if (fstat(fd_, &st) != 0) fail(path, std::strerror(errno));
  if (uint64_t(st.st_size) < kBlockSize)
    fail(path, "not a heaplab raw capture (file too short: " + std::to_string(st.st_size) + " bytes)");
  void* h = mmap(nullptr, kBlockSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (h == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
  header_ = static_cast<FileHeader*>(h);
  acquire_fence();
  check_header(*header_, path);
#if !defined(__x86_64__)
  if (header_->clock == kClockTsc) fail(path, "raw capture uses the TSC, which this machine cannot read");
#endif
  const std::string blocks = path + ".blocks";
  blocks_fd_ = ::open(blocks.c_str(), (consume_ ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (blocks_fd_ < 0) fail(blocks, std::strerror(errno));
  // At once, not at the first poll: until the shim sees a reader it
  // appends every full block to .blocks without a bound, and the first poll
  // comes only after the clock's rate is measured and the normaliser is
  // set up (with 512 busy threads on two cores, long enough for most of a
  // capture: 319 MiB of scratch in one run of churn 512 4000).
  beat();
  // Threads that wait for a reader to open the file (the shim appends at
  // most raw::kLivePreReaderBlocks before that) go on at once.
  if (consume_) mark_opened(header_);
}

bool release_waiting_shim(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  // (Mapped only once the header block is in the file: past its end, a
  // read of the mapping would be SIGBUS.)
  void* h = fstat(fd, &st) == 0 && uint64_t(st.st_size) >= kBlockSize
                ? mmap(nullptr, kBlockSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  ::close(fd);
  if (h == MAP_FAILED) return false;
  auto* header = static_cast<FileHeader*>(h);
  // (Only a header the shim has written: its magic is written last, and a
  // store before that would be overwritten.)
  const bool valid = std::memcmp(header->magic, kFileMagic, sizeof kFileMagic) == 0;
  if (valid) mark_opened(header);
  munmap(h, kBlockSize);
  return valid;
}

void LiveRawFile::beat() {
  if (!consume_ || final_) return;
  __atomic_store_n(&header_->consumer_ns, mono_now(), __ATOMIC_RELEASE);
  heartbeat_ = true;
}

void LiveRawFile::release() {
  if (header_) {
    if (heartbeat_) {
      __atomic_store_n(&header_->consumer_ns, uint64_t{0}, __ATOMIC_RELEASE);  // never hold the shim back
      wake_waiters();
    }
    munmap(header_, kBlockSize);
    header_ = nullptr;
  }
  if (ring_) munmap(const_cast<uint8_t*>(ring_), ring_size_);
  ring_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  if (blocks_fd_ >= 0) ::close(blocks_fd_);
  fd_ = blocks_fd_ = -1;
}

LiveRawFile::~LiveRawFile() { release(); }

uint64_t LiveRawFile::now() const {
#if defined(__x86_64__)
  if (header_->clock == kClockTsc) return __rdtsc();
#endif
  return mono_now();
}

double LiveRawFile::ns_per_tick() const {
  if (header_->clock == kClockMonotonic) return 1.0;
  // The clock pair read closest together of a few (a preempted read is off by far more).
  uint64_t m1 = 0, t1 = 0, best = UINT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const uint64_t a = now(), m = mono_now(), b = now();
    if (b >= a && b - a < best) {
      best = b - a;
      m1 = m;
      t1 = a + (b - a) / 2;
    }
  }
  const uint64_t m0 = header_->start_mono_ns, t0 = header_->start_ticks;
  if (m1 < m0 + 20000000 || t1 <= t0) return 0;
  return double(m1 - m0) / double(t1 - t0);
}

bool LiveRawFile::clean_exit() const { return acquire(&header_->flags) & kFlagCleanExit; }

std::vector<std::string> LiveRawFile::command_line() const { return argv_of(*header_); }

void LiveRawFile::map_ring() {
  struct stat st;
  if (fstat(fd_, &st) != 0) fail(path_, std::strerror(errno));
  const uint64_t size = uint64_t(st.st_size);
  if (size <= ring_size_) return;
  // (Writable when consuming: blocks read in place are zeroed and given back.)
  void* p = mmap(nullptr, size, consume_ ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) fail(path_, std::string("cannot map: ") + std::strerror(errno));
  if (ring_) munmap(const_cast<uint8_t*>(ring_), ring_size_);
  ring_ = static_cast<const uint8_t*>(p);
  ring_size_ = size;
  slots_ = uint32_t(std::min<uint64_t>(UINT32_MAX, (size - kBlockSize) / kBlockSize));
}

// A block's header if it is whole: the magic read before and after the rest.
bool LiveRawFile::read_header(const uint8_t* block, BlockHeader* out) const {
  const auto* h = reinterpret_cast<const BlockHeader*>(block);
  if (acquire(&h->magic) != kBlockMagic) return false;
  std::memcpy(out, block, sizeof *out);
  acquire_fence();
  return acquire(&h->magic) == kBlockMagic && out->magic == kBlockMagic &&
         __atomic_load_n(&h->thread_block_seq, __ATOMIC_RELAXED) == out->thread_block_seq &&
         out->thread < threads_.size();
}

void LiveRawFile::note_block(const BlockHeader& h) {
  Thread& t = threads_[h.thread];
  if (!t.seen || h.thread_block_seq >= t.top_seq) {
    t.name.assign(h.name, strnlen(h.name, sizeof h.name));
    if (!t.seen) t.tid = h.tid;
  }
  t.seen = true;
  t.top_seq = std::max(t.top_seq, h.thread_block_seq);
}

void LiveRawFile::read_appended(uint64_t offset, uint8_t* buf) const {
  uint64_t done = 0;
  while (done < kBlockSize) {
    ssize_t n = pread(blocks_fd_, buf + done, kBlockSize - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path_ + ".blocks", "cannot read block at offset " + std::to_string(offset));
    if (n == 0) {  // cut short (the process died appending it): the rest reads as zero
      std::memset(buf + done, 0, kBlockSize - done);
      return;
    }
    done += uint64_t(n);
  }
}

// Appended blocks [scanned_, upto) and those not readable before.
void LiveRawFile::index_appended(uint64_t upto) {
  std::vector<uint64_t> retry;
  retry.swap(unreadable_);
  for (uint64_t b = scanned_; b < upto; ++b) retry.push_back(b);
  scanned_ = std::max(scanned_, upto);
  for (uint64_t b : retry) {
    BlockHeader h;
    ssize_t n = pread(blocks_fd_, &h, sizeof h, off_t(b * kBlockSize));
    if (n != ssize_t(sizeof h) || h.magic != kBlockMagic || h.thread >= threads_.size()) {
      if (!final_) unreadable_.push_back(b);  // reserved, not written yet
      continue;
    }
    ++blocks_;
    Thread& t = threads_[h.thread];
    note_block(h);
    if (h.thread_block_seq < t.next_seq && !final_) {
      consume(b * kBlockSize);  // its records were read from the mapping
      continue;
    }
    t.blocks().appended[h.thread_block_seq] = b * kBlockSize;
  }
}

void LiveRawFile::consume(uint64_t offset) {
  if (!consume_) return;
  if (punch_error_.empty() &&
      fallocate(blocks_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(offset), off_t(kBlockSize)) != 0)
    punch_error_ = std::strerror(errno);
  count_consumed();
}

// Threads of the program waiting for consumed blocks (the shim's
// wait_for_consumer) sleep on the count's low half: all woken when the
// reader stops.
void LiveRawFile::wake_waiters() {
  if (!header_) return;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header_->consumed_blocks), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
          0);
}

void LiveRawFile::give_back(uint32_t index, uint64_t records) {
  if (!consume_ || index >= slots_) return;
  auto* block = const_cast<uint8_t*>(slot_block(index));
  // The magic first: a block without it is never read as a thread's. (No
  // thread writes it any more, and the shim takes it only through the
  // ring's release below.) Then the header and the records written: the
  // rest was zero when the block was taken, and stayed so but for records
  // whose head was never written (a thread that died inside the shim), and
  // a record is read only once its head is, which is written last. (A
  // thread that ends after a few calls leaves a block mostly untouched:
  // zeroing it all dirtied 16 pages of the mapping a thread.)
  __atomic_store_n(reinterpret_cast<uint32_t*>(block), 0u, __ATOMIC_RELEASE);
  std::memset(block + sizeof(uint32_t), 0,
              kBlockHeaderSize - sizeof(uint32_t) + std::min<uint64_t>(records, kRecordsPerBlock) * kRecordSize);
  FreeBlocks* f = free_blocks();
  const uint64_t tail = f->tail;
  // (Full only if threads stopped taking: the block then stays unused.)
  if (tail - __atomic_load_n(&f->head, __ATOMIC_ACQUIRE) < kFreeBlocksMax) {
    __atomic_store_n(&f->index[tail % kFreeBlocksMax], index, __ATOMIC_RELAXED);
    __atomic_store_n(&f->tail, tail + 1, __ATOMIC_RELEASE);
  }
  ++given_back_;
  count_consumed();
}

uint32_t LiveRawFile::exit_word(const uint8_t* block) {
  return acquire(&reinterpret_cast<const BlockHeader*>(block)->exit_word);
}

// Thread `thread` found gone (once): its last block counted as left in the
// mapping for this reader, as the shim counts the blocks it leaves, so that
// consuming it keeps the count even. (Not counted by the shim as the thread
// began to end: the wait limit would then hold running threads until the
// ending one has gone, and the ending one may wait for them.)
void LiveRawFile::note_gone(uint32_t thread) {
  Thread& t = threads_[thread];
  if (t.gone) return;
  t.gone = true;
  __atomic_fetch_add(&free_blocks()->published, 1u, __ATOMIC_ACQ_REL);
  ++threads_gone_;
}

void LiveRawFile::count_consumed() {
  ++consumed_;
  __atomic_store_n(&header_->consumed_blocks, consumed_, __ATOMIC_RELEASE);
  // One waiting thread may append one more block: wake one (a system call
  // per 2,046 records; waking them all would wake hundreds to append one).
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header_->consumed_blocks), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

uint64_t LiveRawFile::unconsumed() const {
  if (!consume_) return 0;
  const uint64_t appended = acquire(&header_->data_blocks) + acquire(&free_blocks()->published);
  return appended > consumed_ ? appended - consumed_ : 0;
}

uint64_t LiveRawFile::ahead_limit() const {
  return live_ahead_blocks(running_threads(acquire(&header_->threads), acquire(&header_->threads_ended)));
}

uint64_t LiveRawFile::poll() {
  const uint64_t t = now();
  polled_at_ = std::chrono::steady_clock::now();
  beat();
  const uint32_t nthreads = acquire(&header_->next_thread);
  map_ring();
  const uint32_t slots = std::min(nthreads, slots_);
  const uint64_t numbers = thread_numbers(slots, acquire(&header_->threads), given_back_);
  if (threads_.size() < numbers) threads_.resize(numbers);
  // Appended blocks first: a thread's block moves from the mapping to
  // .blocks, never back.
  index_appended(acquire(&header_->data_blocks));
  for (const uint32_t n : polled_)
    if (threads_[n].held) threads_[n].held->mapped.clear();
  polled_.clear();
  for (uint32_t s = 0; s < slots; ++s) {
    BlockHeader h;
    // (The exit word before the header: a thread gone cannot move on from
    // the block it ended in.)
    const bool gone = consume_ && !final_ && (exit_word(slot_block(s)) & kExitOwnerDied);
    acquire_fence();
    if (!read_header(slot_block(s), &h)) continue;
    note_block(h);
    // (A thread gone, its last block read, keeps no bookkeeping: a block of
    // it still here is one with a hole, kept.)
    if (const Thread& th = threads_[h.thread]; th.gone && th.next_seq > th.top_seq && !th.held) continue;
    std::vector<Slot>& mapped = threads_[h.thread].blocks().mapped;
    if (mapped.empty()) polled_.push_back(h.thread);
    mapped.push_back(Slot{h.thread_block_seq, s});
    // Gone: its last block now waits for this reader, and its cursor ends
    // once past it. (Found here, not only once the cursor, perhaps far
    // behind, reaches the block. A block it was pinned to before is not its
    // last: counted as left by the shim.)
    if (gone && h.thread_block_seq == threads_[h.thread].top_seq) note_gone(h.thread);
  }
  // Full blocks read in place while current: given back once their thread
  // is seen past them with the block still in its slot (left there, not
  // copied); forgotten once the slot holds something else (copied to
  // .blocks, and the slot reused).
  if (consume_ && !final_) {
    size_t keep = 0;
    for (const InPlace& b : read_in_place_) {
      BlockHeader h;
      if (b.index >= slots) continue;
      // (The exit word before the header: a thread gone cannot move on
      // from the block it ended in.)
      const uint8_t* block = slot_block(b.index);
      const uint32_t exit = exit_word(block);
      acquire_fence();
      if (!read_header(block, &h) || h.thread != b.thread || h.thread_block_seq != b.seq) continue;
      if (exit & kExitOwnerDied) {  // its thread ended with it full (or pinned to it)
        if (threads_[b.thread].top_seq == b.seq) note_gone(b.thread);
        give_back(b.index);
        continue;
      }
      if (exit == 0 && (threads_[b.thread].top_seq > b.seq ||
                        acquire(&reinterpret_cast<const BlockHeader*>(block)->left) == kBlockLeftFull)) {
        give_back(b.index);
        continue;
      }
      read_in_place_[keep++] = b;
    }
    read_in_place_.resize(keep);
  }
  // Blocks counted: appended ones, and mapped ones never appended.
  return t;
}

void LiveRawFile::finish() {
  wake_waiters();
  final_ = true;
  if (heartbeat_) __atomic_store_n(&header_->consumer_ns, uint64_t{0}, __ATOMIC_RELEASE);
  poll();
}

std::unique_ptr<RecordCursor> LiveRawFile::cursor(size_t thread) { return std::make_unique<LiveCursor>(*this, thread); }

LiveRawFile::Buffer LiveRawFile::take_buffer() {
  ++buffers_held_;
  if (spare_buffers_.empty()) return Buffer(kBlockSize);
  Buffer b = std::move(spare_buffers_.back());
  spare_buffers_.pop_back();
  return b;
}

void LiveRawFile::put_buffer(Buffer&& buf) {
  if (buf.empty()) return;
  --buffers_held_;
  if (buf.size() == kBlockSize && spare_buffers_.size() < kSpareBuffers) spare_buffers_.push_back(std::move(buf));
  Buffer().swap(buf);  // (not `buf = {}`: assigning an empty list keeps the storage)
}

}  // namespace heaplab::normalise
