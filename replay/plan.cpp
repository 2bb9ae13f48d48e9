#include "replay/plan.h"

#include <xxhash.h>
#if defined(__x86_64__) && defined(HEAPLAB_XXH_DISPATCH)
// XXH3 on AVX2 where the CPU has it (chosen at run time; the same hashes):
// twice SSE2's speed here. (CMakeLists.txt: where the library has it.)
#include <xxh_x86dispatch.h>
#endif

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <queue>
#include <span>
#include <system_error>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>

#include "capture/format/id_map.h"
#include "capture/format/mapping_guard.h"
#include "common/json.h"
#include "common/progress.h"
#include "replay/histogram.h"

namespace heaplab::replay {

using trace::Event;
using trace::Op;

namespace {

// File layout: a header page (PlanHeader, then one PlanThread per replay
// thread; more pages if there are many threads), then per thread its steps,
// then per thread its times (if any), then per thread its live sums (if
// any), then per thread the checksums of its arrays (plan.h,
// plan_chunk_sum). Arrays start on page boundaries.
constexpr char kMagic[8] = {'H', 'L', 'P', 'L', 'A', 'N', 0, 1};
constexpr uint32_t kPlanVersion = 9;
constexpr uint64_t kPage = 4096;

struct PlanHeader {
  char magic[8];
  uint32_t version;
  uint32_t threads;
  uint64_t max_id;
  uint64_t slots;
  uint64_t total_steps;
  uint64_t has_times;
  uint64_t has_live;
  uint64_t ops[trace::kOpCount];
  uint64_t live_peak;    // the trace's live-bytes peak
  uint64_t peak_step;    // the step that reaches it (kNoPeak: none)
  uint32_t peak_thread;  // on this replay thread
  uint32_t reserved;
  uint64_t memory_ops[kMemorySteps];
};

struct PlanThread {
  uint64_t steps_offset;
  uint64_t steps;
  uint64_t times_offset;  // 0 = none
  uint64_t live_offset;   // 0 = none
  // A checksum per kPlanSumEntries entries of each array (plan_chunk_sum):
  // the steps' at sums_offset, the times' (if any) sums_stride checksums
  // on, the live sums' (if any) as far again.
  uint64_t sums_offset;
  uint64_t sums_stride;
};

// Where an array's checksums go: the file offset of its chunk `chunk`'s,
// and what seeds them.
struct SumsAt {
  uint64_t offset = 0;
  uint32_t thread = 0;
  uint64_t chunk = 0;
  PlanArray array = PlanArray::steps;
};

uint64_t page_up(uint64_t v) { return (v + kPage - 1) & ~(kPage - 1); }

// The plan's file, `len` bytes: the caller's file (its disk space reserved
// first, for the ranges the plan fills whatever its trace: a disk too full
// for them is an error now), or a new memfd. It is written with
// pwrite from a buffer per array (writing through a mapping would make the
// kernel read, or zero, each new page before it is overwritten).
// release() hands over the descriptor.
struct PlanFile {
  int fd = -1;
  size_t len = 0;
  bool writeback = false;  // start each write's writeback at once (sync_file_range)
  PlanFile(uint64_t bytes, const std::vector<std::pair<uint64_t, uint64_t>>& reserve, int given, bool early_writeback)
      : len(size_t(bytes)), writeback(given >= 0 && early_writeback) {
    fd = given >= 0 ? given : memfd_create("heaplab-plan", MFD_CLOEXEC);
    if (fd < 0) throw PlanError(std::string("memfd_create: ") + std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(len)) != 0) {
      const int err = errno;
      close(fd);
      throw PlanError("sizing the replay plan (" + std::to_string(len) + " bytes): " + std::strerror(err));
    }
    if (given >= 0) {
      uint64_t reserved = 0;
      for (const auto& [at, n] : reserve) reserved += n;
      for (const auto& [at, n] : reserve) {
        if (n == 0) continue;
        if (const int err = posix_fallocate(fd, static_cast<off_t>(at), static_cast<off_t>(n));
            err != 0 && err != EOPNOTSUPP) {
          close(fd);
          throw PlanError("reserving disk space for the replay plan (" + std::to_string(reserved) +
                          " bytes): " + std::strerror(err));
        }
      }
    }
  }
  ~PlanFile() {
    if (fd >= 0) close(fd);
  }
  void write(uint64_t off, const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    const uint64_t start = off, bytes = n;
    while (n > 0) {
      const ssize_t w = pwrite(fd, p, n, static_cast<off_t>(off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = w < 0 ? errno : ENOSPC;
        throw PlanError(std::string("writing the replay plan: ") + std::strerror(err) +
                        (err == ENOSPC ? " (its reallocs, callocs and aligned calls took more than the room reserved "
                                         "for it first: set HEAPLAB_PLAN_DIR to a file system with more room)"
                                       : ""));
      }
      p += w;
      off += uint64_t(w);
      n -= size_t(w);
    }
    // (Asynchronous: it only queues the pages for the disk. Failure only
    // leaves the work to the final sync. Only the pages this write fills:
    // one shared with the next write would be written twice, and on file
    // systems with stable pages that write would wait for the disk.)
    const uint64_t first = page_up(start), end = (start + bytes) & ~(kPage - 1);
    if (writeback && end > first)
      (void)sync_file_range(fd, static_cast<off_t>(first), static_cast<off_t>(end - first), SYNC_FILE_RANGE_WRITE);
  }
  // Writes `entries` entries of `width` bytes at `off`, the start of chunk
  // `at.chunk` of its array, and their checksums at `at.offset`.
  void write_summed(uint64_t off, const void* data, size_t entries, size_t width, const SumsAt& at) {
    write(off, data, entries * width);
    const uint64_t chunks = plan_sum_count(entries);
    if (chunks == 0) return;
    uint64_t sums[64];
    const char* p = static_cast<const char*>(data);
    for (uint64_t c = 0, done = 0; c < chunks; done += 64) {
      const uint64_t n = std::min<uint64_t>(64, chunks - c);
      for (uint64_t i = 0; i < n; ++i, ++c) {
        const size_t first = size_t(c * kPlanSumEntries), n_in = std::min<size_t>(kPlanSumEntries, entries - first);
        sums[i] = plan_chunk_sum(p + first * width, n_in * width, at.thread, at.chunk + c, at.array);
      }
      write(at.offset + done * 8, sums, n * 8);
    }
  }
  int release() {
    const int f = fd;
    fd = -1;
    return f;
  }
  // Gives [from, to) back to the file system (from rounded up to a page):
  // room the layout kept that the plan did not use. (Where the file system
  // cannot punch holes, the plan keeps the room, and works as well.)
  void punch(uint64_t from, uint64_t to) {
    from = page_up(from);
    if (to > from) (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(from), off_t(to - from));
  }
};

// One of the builder's helper threads, or none (not joinable) where the
// process can start no more threads: the builder then does that work
// itself, as on one core.
template <class F>
std::thread start_thread(bool wanted, F&& f) {
  if (!wanted) return {};
  try {
    return std::thread(std::forward<F>(f));
  } catch (const std::system_error&) {
    return {};
  }
}

// Writes the plan's arrays on a thread of its own: the builder hands over
// a full buffer and goes on filling an empty one (copying the plan into
// the page cache was a fifth of a build on one core). At most
// kQueued bytes wait; the first error is thrown to the builder at its
// next hand-over or at finish().
class PlanWriter {
 public:
  static constexpr size_t kQueued = size_t{32} << 20;
  // `threaded` off (or no thread to be had): write() writes at once.
  PlanWriter(PlanFile& f, bool threaded) : file_(f) {
    thread_ = start_thread(threaded, [this] { run(); });
  }
  ~PlanWriter() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  PlanWriter(const PlanWriter&) = delete;
  PlanWriter& operator=(const PlanWriter&) = delete;

  // Queues `buf` to be written at `off`, and swaps in an empty buffer (one
  // already written, if any) of at least `reserve` entries.
  template <class T>
  void write(uint64_t off, std::vector<T>& buf, size_t reserve, const SumsAt& sums) {
    const size_t bytes = buf.size() * sizeof(T);
    if (!thread_.joinable()) {
      file_.write_summed(off, buf.data(), buf.size(), sizeof(T), sums);
      buf.clear();
      return;
    }
    std::vector<T> empty;
    {
      std::unique_lock l(m_);
      cv_.wait(l, [&] { return queued_ + bytes <= kQueued || queued_ == 0 || error_; });
      if (error_) std::rethrow_exception(error_);
      auto& pool = std::get<std::vector<std::vector<T>>>(pools_);
      if (!pool.empty()) {
        empty = std::move(pool.back());
        pool.pop_back();
      }
      queued_ += bytes;
      jobs_.push_back(Job{off, sums, std::move(buf)});
    }
    cv_.notify_all();
    empty.clear();
    empty.reserve(reserve);
    buf = std::move(empty);
  }
  // Waits until everything queued is written; throws the first error.
  void finish() {
    if (!thread_.joinable()) return;
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return (jobs_.empty() && !busy_) || error_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  using Buffer = std::variant<std::vector<PlanStep>, std::vector<uint64_t>, std::vector<int64_t>>;
  struct Job {
    uint64_t off;
    SumsAt sums;
    Buffer buf;
  };
  void run() {
    std::unique_lock l(m_);
    for (;;) {
      cv_.wait(l, [&] { return !jobs_.empty() || stop_; });
      if (jobs_.empty()) return;
      Job j = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      const bool failed = error_ != nullptr;
      l.unlock();
      std::exception_ptr err;
      size_t bytes = 0;
      std::visit(
          [&](auto& v) {
            bytes = v.size() * sizeof(v[0]);
            try {
              if (!failed) file_.write_summed(j.off, v.data(), v.size(), sizeof(v[0]), j.sums);
            } catch (...) {
              err = std::current_exception();
            }
          },
          j.buf);
      l.lock();
      busy_ = false;
      queued_ -= bytes;
      if (err && !error_) error_ = err;
      // The buffer goes back for the builder to fill again (or, if even
      // that cannot be had, is freed).
      try {
        std::visit([&](auto& v) { std::get<std::vector<std::decay_t<decltype(v)>>>(pools_).push_back(std::move(v)); },
                   j.buf);
      } catch (const std::bad_alloc&) {
      }
      cv_.notify_all();
    }
  }
  PlanFile& file_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::tuple<std::vector<std::vector<PlanStep>>, std::vector<std::vector<uint64_t>>, std::vector<std::vector<int64_t>>>
      pools_;
  size_t queued_ = 0;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// One array of a replay thread's (steps, times or live sums), appended
// through a buffer of `cap` entries.
// Every flush but the last starts a whole chunk of checksums on.
template <class T>
struct ArrayOut {
  uint64_t offset = 0;   // where the array starts in the file
  uint64_t flushed = 0;  // entries written out
  SumsAt sums;           // its checksums' place (chunk 0's)
  std::vector<T> buf;
  void flush(PlanWriter& w, size_t next_cap) {
    if (buf.empty()) return;
    if (flushed % kPlanSumEntries != 0) throw PlanError("plan: an array written out of its chunks");
    const uint64_t at = offset + flushed * sizeof(T);
    SumsAt here = sums;
    here.chunk = flushed / kPlanSumEntries;
    here.offset = sums.offset + here.chunk * 8;
    flushed += buf.size();
    w.write(at, buf, next_cap, here);
  }
};

// The trace in global order, decoded and merged on a thread of its own up
// to 32 batches of 2,048 events (4 MiB) ahead of the builder (about a sixth
// of a build on one core).
// A reading error is thrown where the builder reaches it, after every
// event before it.
class ReadAhead {
 public:
  static constexpr size_t kBatch = 2048, kRing = 32;
  // `threaded` off (or no thread to be had): next() decodes in place.
  ReadAhead(const trace::TraceReader& r, bool threaded) : cur_(r) {
    ring_[0].events.resize(kBatch);
    if (!threaded) return;
    for (auto& b : ring_) b.events.resize(kBatch);
    thread_ = start_thread(true, [this] { run(); });
  }
  ~ReadAhead() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard l(m_);
      stop_ = true;
    }
    room_.notify_all();
    thread_.join();
  }
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The next batch (empty at the end), valid until the next call.
  std::span<const Event> next() {
    if (!thread_.joinable()) return {ring_[0].events.data(), cur_.next(ring_[0].events.data(), kBatch)};
    std::unique_lock l(m_);
    if (held_) {
      ++tail_;
      held_ = false;
      // The decoder, waiting for room, is woken once half the ring is
      // free, not for every batch (a wake-up each was a tenth of a build).
      if (reader_waits_ && head_ - tail_ <= kRing / 2) room_.notify_one();
    }
    if (head_ == tail_ && !done_) {
      builder_waits_ = true;
      ready_.wait(l, [&] { return head_ != tail_ || done_; });
      builder_waits_ = false;
    }
    if (head_ == tail_) {
      if (error_) std::rethrow_exception(error_);
      return {};
    }
    const Batch& b = ring_[tail_ % kRing];
    held_ = true;
    return {b.events.data(), b.n};
  }

 private:
  struct Batch {
    std::vector<Event> events;
    size_t n = 0;
  };
  void run() {
    try {
      for (;;) {
        Batch* b;
        {
          std::unique_lock l(m_);
          if (head_ - tail_ == kRing && !stop_) {
            reader_waits_ = true;
            room_.wait(l, [&] { return head_ - tail_ <= kRing / 2 || stop_; });
            reader_waits_ = false;
          }
          if (stop_) return;
          b = &ring_[head_ % kRing];
        }
        b->n = cur_.next(b->events.data(), kBatch);
        bool wake;
        {
          std::lock_guard l(m_);
          if (b->n == 0)
            done_ = true;
          else
            ++head_;
          wake = builder_waits_;
        }
        if (wake) ready_.notify_one();
        if (b->n == 0) return;
      }
    } catch (...) {
      {
        std::lock_guard l(m_);
        error_ = std::current_exception();
        done_ = true;
      }
      ready_.notify_all();
    }
  }
  trace::MergedCursor cur_;
  std::array<Batch, kRing> ring_;
  std::mutex m_;
  std::condition_variable ready_, room_;  // a batch for the builder; room for the decoder
  uint64_t head_ = 0, tail_ = 0;          // batches filled, batches given back
  bool held_ = false, done_ = false, stop_ = false, builder_waits_ = false, reader_waits_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

__extension__ typedef unsigned __int128 uint128;
uint64_t saturate(uint128 v) { return v > UINT64_MAX ? UINT64_MAX : uint64_t(v); }

// 24 bytes, so that the live table's entries (with their key) are 32: two
// a cache line, none across two (a miss each was most of a build).
struct Live {
  uint64_t bytes;
  uint64_t packed;  // the ref the replay knows it by | log2 of its alignment + 1 (0: none) << 48
  uint32_t thread;  // replay thread that produced it (or last moved it)

  // `align`: the alignment it was made with (aligned calls, a power of two), else 0.
  Live(uint64_t b, uint64_t ref, uint64_t align, uint32_t k)
      : bytes(b), packed(ref | (align ? uint64_t(std::countr_zero(align)) + 1 : 0) << 48), thread(k) {}
  Live() : Live(0, 0, 0, 0) {}
  uint64_t plan_id() const { return packed & kMaxObjectId; }
  void set_plan_id(uint64_t ref) { packed = (packed & ~kMaxObjectId) | ref; }
  uint64_t align() const { return packed >> 48 ? uint64_t{1} << ((packed >> 48) - 1) : 0; }
};
static_assert(sizeof(Live) == 24);

// The object table's slots (plan.h, refs). A consumed object's slot goes
// back to the replay thread that consumed it, which reuses it first (last
// in, first out: its own steps run in order, so no wait). A thread that
// gives back far more than it takes (one that frees what another thread
// made) passes its oldest free slots on, kBatch at a time, to a thread that
// runs out; the taker's plan gets one handoff step for the batch: wait until
// the giver has made the steps that freed them. They were freed at least
// kBatch of the giver's consumes earlier, so the wait rarely waits. The
// table is the peak of live objects plus at most 2 kBatch slots a thread.
class SlotTable {
 public:
  static constexpr size_t kBatch = 1024;
  SlotTable(size_t threads, bool reuse) : own_(threads), gen_(1, 0), reuse_(reuse) {}  // slot 0: NULL

  // A ref for an object that replay thread k produces in a step after its
  // step `step` (the index the next step takes); `handoff(giver, steps)`
  // appends a handoff step there, which moves the next index to step + 1.
  template <class Handoff>
  uint64_t take(uint32_t k, uint64_t step, Handoff&& handoff) {
    for (;;) {
      uint32_t slot;
      if (!own_[k].empty()) {
        slot = own_[k].back().slot;
        own_[k].pop_back();
      } else if (!pool_.empty()) {
        Batch b = std::move(pool_.front());
        pool_.pop_front();
        if (b.thread != k) {
          handoff(b.thread, b.after);
          ++handoffs_;
          ++step;
        }
        for (uint32_t x : b.slots) own_[k].push_back(Free{x, step});
        continue;
      } else {
        if (gen_.size() > kMaxSlot) throw PlanError("inconsistent trace: more than 2^32 objects live at once");
        slot = uint32_t(gen_.size());
        gen_.push_back(0);
      }
      return make_ref(slot, ++gen_[slot]);
    }
  }
  // `ref`'s object was consumed by replay thread k's step `step`.
  void give(uint64_t ref, uint32_t k, uint64_t step) {
    if (!reuse_) return;
    const uint32_t slot = uint32_t(ref_slot(ref));
    if (gen_[slot] >= kMaxGeneration) {
      ++retired_;
      return;
    }
    own_[k].push_back(Free{slot, step + 1});
    if (own_[k].size() >= 2 * kBatch) {
      Batch b{k, 0, {}};
      b.slots.reserve(kBatch);
      for (size_t i = 0; i < kBatch; ++i) {
        b.slots.push_back(own_[k].front().slot);
        b.after = std::max(b.after, own_[k].front().after);
        own_[k].pop_front();
      }
      pool_.push_back(std::move(b));
    }
  }
  // `ref` is never reused (more than one step read it).
  void retire(uint64_t) { ++retired_; }
  uint64_t slots() const { return gen_.size() - 1; }
  uint64_t retired() const { return retired_; }
  uint64_t handoffs() const { return handoffs_; }

 private:
  struct Free {
    uint32_t slot;
    uint64_t after;  // free for another thread once this one has made `after` steps
  };
  struct Batch {
    uint32_t thread;
    uint64_t after;
    std::vector<uint32_t> slots;
  };
  // A thread's free slots: taken from the back (its newest), handed on
  // from the front (its oldest). A ring, not a std::deque: a deque whose
  // back goes to and fro across a block's edge (a thread freeing and
  // making in turn) allocates and frees a block each time.
  class FreeRing {
   public:
    bool empty() const { return head_ == tail_; }
    size_t size() const { return tail_ - head_; }
    const Free& back() const { return buf_[(tail_ - 1) & mask_]; }
    const Free& front() const { return buf_[head_ & mask_]; }
    void pop_back() { --tail_; }
    void pop_front() { ++head_; }
    void push_back(const Free& f) {
      if (size() == buf_.size()) grow();
      buf_[tail_++ & mask_] = f;
    }

   private:
    void grow() {
      std::vector<Free> b(std::max<size_t>(16, buf_.size() * 2));
      for (size_t i = 0; i < size(); ++i) b[i] = buf_[(head_ + i) & mask_];
      tail_ = size();
      head_ = 0;
      buf_.swap(b);
      mask_ = buf_.size() - 1;
    }
    std::vector<Free> buf_;
    size_t mask_ = 0, head_ = 0, tail_ = 0;
  };
  std::vector<FreeRing> own_;
  std::deque<Batch> pool_;
  std::vector<uint16_t> gen_;
  uint64_t retired_ = 0, handoffs_ = 0;
  bool reuse_;
};

[[noreturn]] void inconsistent(const Event& e, const std::string& what) {
  throw PlanError("inconsistent trace: event " + std::to_string(e.seq) + " (thread " + std::to_string(e.thread) + ", " +
                  std::string(trace::op_name(e.op)) + "): " + what);
}

}  // namespace

const char* memory_step_name(unsigned op) {
  switch (op) {
    case kStepMap:
      return "mmap";
    case kStepUnmap:
      return "munmap";
    case kStepArg:
      return "mremap_length";
    case kStepRemap:
      return "mremap";
    case kStepDontneed:
      return "madvise_dontneed";
    case kStepLazyFree:
      return "madvise_free";
    case kStepTouch:
      return "touch_mapping";
    case kStepTouchObject:
      return "touch_object";
  }
  return "?";
}

namespace {

// Recorded threads that never ran at the same time, together: per group its
// threads in the order they started. A thread runs from its first event or
// memory call to its thread_end event (TraceReader::thread_end_seq), or
// to the end of the trace without one. (A live capture writes the
// thread_end once it sees the thread gone, at most a little later than it
// went, and sometimes much later: a thread is never taken for gone before
// it had.) Threads are taken in the order
// they started, each into the group whose last thread ended first, if it
// ended before this one started, else into a group of its own: as few
// groups as ever ran at once.
std::vector<std::vector<uint32_t>> thread_groups(const trace::TraceReader& r) {
  const auto& active = r.active_threads();
  // Only a thread_end written once the thread was found gone says it had
  // gone by then (capture.thread_ends, FORMAT.md); one written after its
  // last record, or of unknown origin, says nothing: every thread then runs
  // to the end of the trace.
  const nlohmann::json meta = common::parse_bounded_json(r.metadata());
  const nlohmann::json* capture = meta.is_object() && meta.contains("capture") ? &meta["capture"] : nullptr;
  const bool ends_found_gone =
      capture && capture->is_object() && capture->contains("thread_ends") && (*capture)["thread_ends"] == "found_gone";
  if (!ends_found_gone) {
    std::vector<std::vector<uint32_t>> each(active.size());
    for (size_t i = 0; i < active.size(); ++i) each[i] = {active[i]};
    return each;
  }
  struct Span {
    uint64_t first, last;  // seqs; last = UINT64_MAX: never ended
    uint32_t thread;
  };
  std::vector<Span> spans;
  spans.reserve(active.size());
  std::vector<uint32_t> span_of(r.thread_count(), UINT32_MAX);
  for (uint32_t t : active) {
    span_of[t] = uint32_t(spans.size());
    spans.push_back(Span{r.chunks()[r.thread_chunks(t).front()].first_seq, r.thread_end_seq(t), t});
  }
  for (const auto& [t, m] : r.memory_calls_by_thread()) {
    if (t >= span_of.size() || span_of[t] == UINT32_MAX) continue;
    Span& sp = spans[span_of[t]];
    sp.first = std::min(sp.first, m.first_after);
    if (sp.last != UINT64_MAX) sp.last = std::max(sp.last, m.last_after);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.first < b.first; });
  std::vector<std::vector<uint32_t>> groups;
  // (the seq its last thread ended at, group), the earliest first
  std::priority_queue<std::pair<uint64_t, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>, std::greater<>> ends;
  for (const Span& sp : spans) {
    uint32_t g;
    if (!ends.empty() && ends.top().first < sp.first) {
      g = ends.top().second;
      ends.pop();
    } else {
      g = uint32_t(groups.size());
      groups.emplace_back();
    }
    groups[g].push_back(sp.thread);
    ends.emplace(sp.last, g);
  }
  return groups;
}

}  // namespace

uint32_t threads_at_once(const trace::TraceReader& r) { return uint32_t(thread_groups(r).size()); }

std::vector<std::vector<uint32_t>> fold_threads(const trace::TraceReader& r, uint32_t threads, bool* sequential) {
  const auto& active = r.active_threads();
  if (sequential) *sequential = false;
  std::vector<std::vector<uint32_t>> fold;
  if (threads == 0 || threads < active.size()) {
    std::vector<std::vector<uint32_t>> groups = thread_groups(r);
    if (groups.size() < active.size() && (threads == 0 || groups.size() <= threads)) {
      if (sequential) *sequential = true;
      return groups;
    }
  }
  if (threads == 0 || threads >= active.size()) {
    for (uint32_t t : active) fold.push_back({t});
    return fold;
  }
  std::vector<uint32_t> order(active);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return r.thread_event_count(a) > r.thread_event_count(b); });
  fold.resize(threads);
  std::vector<uint64_t> load(threads, 0);
  for (uint32_t t : order) {
    const size_t k = std::min_element(load.begin(), load.end()) - load.begin();
    fold[k].push_back(t);
    load[k] += r.thread_event_count(t);
  }
  for (auto& f : fold) std::sort(f.begin(), f.end());
  return fold;
}

namespace {

// Where each replay thread's arrays lie in the plan's file: sized for all
// its recorded threads' events (a few markers more than its calls) and its
// memory calls, each perhaps with a kStepExt step, a touch step per object
// with a recorded count and a handoff step per SlotTable::kBatch slots
// taken. How many calls need a kStepExt is known once the plan is built,
// so the file is sized for all of them (its unused ends are then given
// back, PlanFile::punch), and its disk space reserved for none: `reserve`,
// the room the plan needs at least, is what is held against the disk.
struct Layout {
  std::vector<PlanThread> table;
  std::vector<uint64_t> cap;
  std::vector<std::pair<uint64_t, uint64_t>> reserve;  // offset, bytes
  uint64_t total = 0;
  uint64_t reserved = 0;  // the sum of `reserve`
};
Layout layout_of(const trace::TraceReader& r, const std::vector<std::vector<uint32_t>>& fold,
                 const std::vector<uint64_t>& memory_steps, uint64_t touch_steps, bool times, bool live) {
  const size_t nthreads = fold.size();
  Layout l;
  l.table.resize(nthreads);
  l.cap.assign(nthreads, 0);
  const uint64_t first = page_up(sizeof(PlanHeader) + sizeof(PlanThread) * nthreads);
  uint64_t off = first;
  l.reserve.emplace_back(0, first);
  std::vector<uint64_t> least(nthreads);  // steps at least: none with a kStepExt
  for (size_t k = 0; k < nthreads; ++k) {
    uint64_t& c = l.cap[k];
    uint64_t events = 0;
    for (uint32_t t : fold[k]) events += r.thread_event_count(t);
    // (At most one touch step per object the thread makes.)
    const uint64_t touches = std::min(touch_steps, events);
    // (A kStepNewThread before each recorded thread but the first.)
    c = 2 * (memory_steps[k] + events) + touches + fold[k].size();
    c += c / SlotTable::kBatch + 1;
    least[k] = memory_steps[k] + events + touches;
    l.table[k].steps_offset = off;
    l.reserve.emplace_back(off, least[k] * sizeof(PlanStep));
    off = page_up(off + c * sizeof(PlanStep));
  }
  if (times)
    for (size_t k = 0; k < nthreads; ++k) {
      l.table[k].times_offset = off;
      l.reserve.emplace_back(off, least[k] * sizeof(uint64_t));
      off = page_up(off + l.cap[k] * sizeof(uint64_t));
    }
  if (live)
    for (size_t k = 0; k < nthreads; ++k) {
      l.table[k].live_offset = off;
      l.reserve.emplace_back(off, least[k] * sizeof(int64_t));
      off = page_up(off + l.cap[k] * sizeof(int64_t));
    }
  // (The checksums' room is reserved whole: 1/512 of the arrays' at most.)
  const uint64_t arrays = 1 + (times ? 1 : 0) + (live ? 1 : 0), sums_from = off;
  for (size_t k = 0; k < nthreads; ++k) {
    l.table[k].sums_offset = off;
    l.table[k].sums_stride = plan_sum_count(l.cap[k]);
    off += arrays * l.table[k].sums_stride * 8;
  }
  l.reserve.emplace_back(sums_from, off - sums_from);
  off = page_up(off);
  l.total = std::max(off, kPage);
  for (const auto& [at, n] : l.reserve) l.reserved += page_up(n);
  return l;
}

// What a plan is made of besides the heap calls, and where everything
// goes, from the trace's index and its memory events (and each thread's
// last chunk, decoded once a reader, for its thread_end: fold_threads): the
// fold (plus a replay thread for a program that only mapped memory), the
// program's own memory calls in trace order and how many steps each
// replay thread gets of them, the objects' recorded resident pages, and the
// calls the program timed. build_plan and plan_bytes both start here.
struct Shape {
  std::vector<std::vector<uint32_t>> fold;
  std::vector<uint32_t> replay_of;     // by recorded thread
  uint64_t calls = 0;                  // the program's own memory calls
  std::vector<uint64_t> memory_steps;  // by replay thread
  uint64_t object_pages = 0;           // objects with a recorded resident count
  bool sequential = false;             // fold_threads

  // The replay thread of recorded thread t (one that only mapped memory has
  // none of its own: the first one makes its calls).
  uint32_t replay_thread(uint32_t t) const { return t < replay_of.size() && replay_of[t] != kNone ? replay_of[t] : 0u; }
  // Whether recorded thread t has a replay thread (it has heap events).
  bool has_replay_thread(uint32_t t) const { return t < replay_of.size() && replay_of[t] != kNone; }
  static constexpr uint32_t kNone = UINT32_MAX;
};

Shape shape_of(const trace::TraceReader& r, const PlanOptions& opt) {
  Shape sh;
  sh.fold = fold_threads(r, opt.threads, &sh.sequential);
  using trace::MemOp;
  sh.calls = r.memory_event_count() - r.memory_event_count(MemOp::object) - r.memory_event_count(MemOp::latency);
  if (sh.calls != 0 && sh.fold.empty()) sh.fold.push_back({});  // a program that never called malloc
  sh.replay_of.assign(r.thread_count(), Shape::kNone);
  for (uint32_t k = 0; k < sh.fold.size(); ++k)
    for (uint32_t t : sh.fold[k]) sh.replay_of[t] = k;
  sh.memory_steps.assign(sh.fold.size(), 0);
  for (const auto& [t, m] : r.memory_calls_by_thread()) sh.memory_steps[sh.replay_thread(t)] += m.calls + m.remaps;
  sh.object_pages = r.memory_objects_with_pages();
  return sh;
}

Layout layout_of(const trace::TraceReader& r, const Shape& sh, bool times, bool live) {
  return layout_of(r, sh.fold, sh.memory_steps, sh.object_pages, times, live);
}

}  // namespace

uint64_t plan_bytes(const trace::TraceReader& r, const PlanOptions& opt) {
  return layout_of(r, shape_of(r, opt), opt.times && r.has_time(), opt.live).reserved;
}

uint64_t plan_bytes_at_most(const trace::TraceReader& r, const PlanOptions& opt) {
  return layout_of(r, shape_of(r, opt), opt.times && r.has_time(), opt.live).total;
}

int build_plan(const trace::TraceReader& r, const PlanOptions& opt, PlanSummary& s, int fd,
               std::vector<uint64_t>* event_refs) {
  // `fd` is closed whatever throws: here until the plan file takes it over
  // (a trace whose shape cannot be read, below, left it open before).
  struct Given {
    int fd;
    ~Given() {
      if (fd >= 0) close(fd);
    }
  } given{fd};
  s = PlanSummary{};
  if (event_refs && opt.reuse_slots) throw PlanError("plan: event refs need a table without slot reuse");
  if (event_refs) event_refs->clear();
  Shape sh = shape_of(r, opt);
  s.fold = sh.fold;
  s.recorded_threads = static_cast<uint32_t>(r.active_threads().size());
  s.replay_threads = static_cast<uint32_t>(s.fold.size());
  s.has_times = opt.times && r.has_time();
  s.has_live = opt.live;
  s.sequential = sh.sequential;
  // The program's memory records, read as the heap events go by (never all
  // held): its calls and the calls it timed in trace order, and on a cursor
  // of their own the objects' resident counts, by ascending id as the
  // objects are made.
  trace::MemoryCursor memory(r), objects(r);
  bool calls_left = sh.calls != 0 || r.memory_event_count(trace::MemOp::latency) != 0;
  uint64_t timed_seq = UINT64_MAX, timed_ns = 0;  // the last timed call read
  std::map<uint8_t, LogLinearHistogram> timed_by_op;
  auto object_pages = [&](uint64_t id) -> std::optional<uint64_t> {
    const trace::MemoryEvent* o;
    while ((o = objects.peek()) != nullptr && (o->op != trace::MemOp::object || o->region < id)) objects.next();
    if (!o || o->region != id || o->pages == trace::kUnknownPages) return std::nullopt;
    return o->pages;
  };
  auto replay_thread = [&](uint32_t t) { return sh.replay_thread(t); };

  // The plan is written straight into its file, the header and thread
  // table filled in at the end.
  const size_t nthreads = s.fold.size();
  Layout layout = layout_of(r, sh, s.has_times, s.has_live);
  std::vector<PlanThread>& table = layout.table;
  const std::vector<uint64_t>& cap = layout.cap;
  PlanFile plan(layout.total, layout.reserve, std::exchange(given.fd, -1), opt.writeback);
  // Buffers of about 16 MiB in all (1,024 to 32,768 entries an array: a
  // power of two, so whole chunks of checksums).
  const size_t per =
      std::bit_floor(std::clamp<size_t>((size_t{16} << 20) / (std::max<size_t>(1, nthreads) * 32), 1024, 32768));
  std::vector<ArrayOut<PlanStep>> steps(nthreads);
  std::vector<ArrayOut<uint64_t>> times(nthreads);
  std::vector<ArrayOut<int64_t>> lives(nthreads);
  for (size_t k = 0; k < nthreads; ++k) {
    steps[k].offset = table[k].steps_offset;
    times[k].offset = table[k].times_offset;
    lives[k].offset = table[k].live_offset;
    const uint64_t stride = table[k].sums_stride * 8;
    steps[k].sums = SumsAt{table[k].sums_offset, uint32_t(k), 0, PlanArray::steps};
    times[k].sums = SumsAt{table[k].sums_offset + stride, uint32_t(k), 0, PlanArray::times};
    lives[k].sums = SumsAt{table[k].sums_offset + (s.has_times ? 2 : 1) * stride, uint32_t(k), 0, PlanArray::live};
  }
  PlanWriter writer(plan, opt.helpers);
  // Writes replay thread k's buffered steps, times and live sums (and
  // readies buffers of `next` entries for what follows).
  auto flush = [&](size_t k, size_t next = 0) {
    steps[k].flush(writer, next);
    times[k].flush(writer, next);
    lives[k].flush(writer, next);
  };
  std::vector<uint64_t> thread_live(nthreads, 0);

  auto live = IdMap<Live>::for_events(r.event_count());  // by trace id
  uint64_t trace_max_id = 0;
  uint128 live_bytes = 0, requested = 0;
  const bool complete = r.complete();

  // Appends a step to replay thread k's arrays (packed: perhaps a
  // kStepExt first); its index is then table[k].steps - 1.
  std::vector<uint64_t> last_time(nthreads, 0);  // each replay thread's last step's recorded time
  auto put = [&](uint32_t k, const Step& st, uint64_t time, uint64_t delta) {
    last_time[k] = time;
    PlanStep packed[2];
    const unsigned units = pack_step(st, packed);
    for (unsigned u = 0; u < units; ++u) {
      uint64_t& n_k = table[k].steps;
      if (n_k == cap[k]) throw PlanError("trace: thread event counts do not match its events");
      steps[k].buf.push_back(packed[u]);
      if (s.has_times) times[k].buf.push_back(time);
      if (s.has_live) lives[k].buf.push_back(int64_t(thread_live[k] += u + 1 == units ? delta : 0));  // modular (C++20)
      if (steps[k].buf.size() == per) flush(k, per);
      ++n_k;
      ++s.steps;
    }
  };

  SlotTable slots(nthreads, opt.reuse_slots);
  // A ref for what replay thread k's next step produces (perhaps after a
  // handoff step).
  auto take = [&](uint32_t k, uint64_t time) {
    return slots.take(k, table[k].steps, [&](uint32_t giver, uint64_t made) {
      Step h{};
      h.head = kStepHandoff;
      h.old = giver;
      h.size = made;
      put(k, h, time, 0);
    });
  };

  // A replay thread that runs its recorded threads one after another
  // (sh.sequential): a kStepNewThread before the first step of each but the
  // first, at the recorded time of the one before's last step (a paced
  // replay ends that thread then, not when the next starts).
  std::vector<uint32_t> running(nthreads, Shape::kNone);  // the recorded thread each ran last
  auto begin_thread = [&](uint32_t k, uint32_t t) {
    if (!sh.sequential || running[k] == t || !sh.has_replay_thread(t)) return;
    if (running[k] != Shape::kNone) {
      Step n{};
      n.head = kStepNewThread;
      put(k, n, last_time[k], 0);
      ++s.new_threads;
    }
    running[k] = t;
  };

  // The program's own memory calls, in place: before heap event `seq`, the
  // calls recorded before it.
  struct Region {
    uint64_t ref = 0;        // 0: unknown
    uint64_t length = 0;     // bytes from its base it mapped
    bool read_more = false;  // a remap read `ref` and left the rest of the region with it
  };
  // By trace region, while any of it is mapped. (A region wholly unmapped
  // is dropped: the reader refuses a call that names it later.)
  std::unordered_map<uint64_t, Region> regions;
  trace::MappedBytes mapped;
  uint64_t next_call = 0;                                     // the program's memory calls so far
  std::map<uint64_t, std::map<uint64_t, uint64_t>> unmapped;  // trace region -> unmapped [offset, end)
  auto region = [&](uint64_t rgn) -> Region& { return regions[rgn]; };
  // Counts a replay id (objects, regions and kept objects share the count).
  auto count_id = [&]() {
    if (s.max_id >= kMaxObjectId) throw PlanError("inconsistent trace: too many objects and regions");
    ++s.max_id;
  };
  // Region `g`'s current ref is consumed by the memory step about to be
  // put; its slot goes back once that step's index is known (`give`).
  auto release_region = [&](Region& g, uint64_t& give) {
    if (g.read_more)
      slots.retire(g.ref);  // another thread's remap may still read it
    else
      give = g.ref;
    g.read_more = false;
  };
  auto memory_until = [&](uint64_t seq) {
    using trace::MemOp;
    const trace::MemoryEvent* p;
    for (; (p = memory.peek()) != nullptr && p->op != MemOp::object && p->after <= seq;) {
      const trace::MemoryEvent& m = *memory.next();  // (valid until the next peek)
      if (m.op == MemOp::latency) {
        if (timed_seq != m.after) {  // (the first of two for one call)
          timed_seq = m.after;
          timed_ns = m.length;
        }
        continue;
      }
      const uint64_t call = next_call++;
      const uint32_t k = replay_thread(m.thread);
      begin_thread(k, m.thread);
      Step st{};
      StepOp op = kStepMap;
      uint64_t give = 0;  // the ref this step consumes, to give back once it is put
      if (m.op == MemOp::map) {
        count_id();
        Region& g = region(m.region);
        g = Region{take(k, m.time), m.length, false};
        st.head = uint64_t{kStepMap} | g.ref << 16;
        st.size = m.length;
        ++s.regions;
      } else {
        // (The reader refuses a call on a region never mapped or wholly
        // unmapped: not met here unless the checks disagree.)
        const auto known = regions.find(m.region);
        if (known == regions.end())
          throw PlanError("inconsistent trace: memory call " + std::to_string(call) + " (" +
                          std::string(trace::mem_op_name(m.op)) + ") on region " + std::to_string(m.region) +
                          ", not mapped");
        Region& g = known->second;
        const uint64_t old = g.ref;
        if (old == 0) {
          ++s.unknown_regions;
          continue;
        }
        // A call on bytes its region no longer maps would write, advise or
        // unmap whatever the replay's allocator put there since.
        // (A region has ranges here only while part of it is unmapped: one
        // wholly unmapped says so with its flag.)
        static const std::map<uint64_t, uint64_t> kNoneGone;
        const auto found = unmapped.find(m.region);
        const std::map<uint64_t, uint64_t>& was_gone = found != unmapped.end() ? found->second : kNoneGone;
        const uint64_t lo = m.offset, hi = m.offset + m.length;
        auto after_lo = was_gone.upper_bound(lo);
        if ((after_lo != was_gone.end() && after_lo->first < hi) ||
            (after_lo != was_gone.begin() && std::prev(after_lo)->second > lo))
          throw PlanError("inconsistent trace: memory call " + std::to_string(call) + " (" +
                          std::string(trace::mem_op_name(m.op)) + ") on bytes " + std::to_string(lo) + ".." +
                          std::to_string(hi) + " of region " + std::to_string(m.region) + ", already unmapped");
        st.old = old;
        st.arg = m.offset;
        st.size = m.length;
        switch (m.op) {
          case MemOp::unmap:
            op = kStepUnmap;
            break;
          case MemOp::remap: {
            Step len{};
            len.head = kStepArg;
            len.size = m.length;
            put(k, len, m.time, 0);
            ++s.memory_ops[kStepArg - kStepMap];
            op = kStepRemap;
            st.size = m.new_length;
            ++s.regions;
            break;
          }
          case MemOp::dontneed:
            op = kStepDontneed;
            break;
          case MemOp::lazy_free:
            op = kStepLazyFree;
            break;
          case MemOp::touch:
            op = kStepTouch;
            st.size = std::min<uint64_t>(m.pages * kPage, page_up(m.length));
            break;
          default:
            continue;
        }
        // Whether the region is now wholly unmapped: its unmapped ranges
        // (merged as they come) cover [0, length). (In bytes: a region of
        // the break has neither an aligned base nor an aligned length.)
        bool all_gone = false;
        if (m.op == MemOp::unmap || m.op == MemOp::remap) {
          auto& gone = found != unmapped.end() ? found->second : unmapped[m.region];
          uint64_t a = lo, b = hi;
          auto next = gone.lower_bound(lo);
          if (next != gone.begin() && std::prev(next)->second == lo) {
            a = std::prev(next)->first;
            gone.erase(std::prev(next));
          }
          if (next = gone.find(hi); next != gone.end()) {
            b = next->second;
            gone.erase(next);
          }
          gone[a] = b;
          all_gone = gone.begin()->first == 0 && gone.begin()->second >= g.length;
          if (all_gone) unmapped.erase(m.region);  // (and the region itself, below)
        }
        // Every other call on a region takes its current ref and gives it a
        // new one (the same base): they run in trace order even from
        // different threads (a touch never races the munmap after it). A
        // region wholly unmapped gives its ref back and takes none. A remap
        // reads it too; the rest of the old region, disjoint from the
        // remapped bytes, keeps the ref it had.
        // (The new ref is taken first: a handoff step that comes with it
        // goes before this call, whose index the old ref is given back at.)
        const bool wholly_gone = m.op == MemOp::unmap && all_gone;
        uint64_t next = 0;
        if (!wholly_gone) {
          count_id();
          next = take(k, m.time);
        }
        Region& h = region(m.region);
        if (m.op == MemOp::remap) {
          region(m.new_region) = Region{next, m.new_length, false};
          Region& o = region(m.region);
          if (all_gone) {
            release_region(o, give);
          } else {
            o.read_more = true;
          }
        } else {
          release_region(h, give);
          h.ref = next;
        }
        if (all_gone) regions.erase(m.region);  // (a remap or an unmap that took all it had left)
        st.head = next << 16 | op;
      }
      mapped.apply(m);
      s.mapped_peak = mapped.peak();
      put(k, st, m.time, 0);
      if (give) slots.give(give, k, table[k].steps - 1);
      ++s.memory_ops[(st.head & 0xff) - kStepMap];
    }
    calls_left = p && p->op != MemOp::object;
  };

  ReadAhead cur(r, opt.helpers);
  common::Progress progress("building the replay plan", r.event_count());
  for (;;) {
    progress.update(s.events);
    const std::span<const Event> buf = cur.next();
    const size_t n = buf.size();
    if (n == 0) break;
    // The live table's lines a few events ahead are brought into the cache
    // while this one is planned (a miss each was most of the build).
    constexpr size_t kAhead = 12;
    const auto prefetch = [&](const Event& f) {
      if (f.old) live.prefetch(f.old);
      if (f.id) live.prefetch(f.id);
    };
    for (size_t i = 0; i < std::min(n, kAhead); ++i) prefetch(buf[i]);
    for (size_t i = 0; i < n; ++i) {
      if (i + kAhead < n) prefetch(buf[i + kAhead]);
      const Event& e = buf[i];
      if (calls_left) memory_until(e.seq);
      ++s.events;
      if (event_refs) event_refs->push_back(0);
      if (r.has_time()) s.duration_ns = std::max(s.duration_ns, e.time);
      if (!trace::op_valid(static_cast<unsigned>(e.op)) || e.op == Op::thread_start || e.op == Op::thread_end ||
          e.op == Op::lost)
        continue;
      const uint32_t k = sh.replay_thread(e.thread);
      begin_thread(k, e.thread);
      // Flags the engine relies on: only calls with a result carry them,
      // and a failure never has a result. (A free marked failed would make
      // the plan wait for an object no step produces.)
      if (e.flags != 0 && !trace::op_produces(e.op)) inconsistent(e, "flags on a call that returns nothing");
      if ((e.flags & trace::kFailed) && !(e.flags & trace::kNullResult)) inconsistent(e, "a failed call with a result");
      Step st{};
      st.size = e.size;
      st.arg = trace::op_has(e.op, trace::kCount) ? e.count : e.align;
      // An alignment the call takes (trace::alignment_taken: a power of
      // two, aligned_alloc(3, n) crashes some; posix_memalign's also at
      // least a pointer, else it fails). A call that succeeded with another
      // (an imported log's) is replayed with the next one taken, and counted.
      const bool aligned = trace::op_has(e.op, trace::kAlign);
      if (aligned && trace::op_produces(e.op) && !(e.flags & trace::kFailed) && !trace::alignment_taken(e.op, st.arg)) {
        st.arg = trace::alignment_for_replay(e.op, st.arg);
        ++s.alignments_corrected;
      }
      uint64_t old = 0;
      uint64_t id = 0;
      bool give_old = false;  // the consumed object's slot goes back, once this step is put
      bool at_peak = false;   // this call's step first reaches the live peak
      // Requested bytes this call makes live (or frees), modulo 2^64: sizes
      // near 2^64 (failed or absurd requests) must not overflow, and the
      // sum over threads comes out right whenever the true total fits.
      uint64_t delta = 0;
      if (trace::op_consumes(e.op) && e.old != 0) {
        const bool failed = e.flags & trace::kFailed;
        Live o{};
        Live* kept = failed ? live.find(e.old) : nullptr;
        const bool was_live = failed ? kept != nullptr : live.erase(e.old, &o);
        if (kept) o = *kept;
        if (!was_live) {
          if (complete)
            inconsistent(e, "object " + std::to_string(e.old) +
                                (e.old > trace_max_id ? " does not exist yet" : " was already freed"));
          // A truncated trace lost the chunk that produced it.
          if (e.op != Op::realloc && e.op != Op::reallocarray) {
            ++s.skipped_lost;
            continue;
          }
          ++s.realloc_of_lost;
        } else {
          old = o.plan_id();
          give_old = true;
          if (o.thread != k) ++s.cross_thread_consumes;
          // A sized or aligned delete that names another size or alignment
          // than the object's is undefined, and crashes some allocators:
          // replayed with the object's own, and counted.
          if (!trace::op_produces(e.op)) {
            if (trace::op_has(e.op, trace::kSize) && st.size != o.bytes) {
              st.size = o.bytes;
              ++s.sizes_corrected;
            }
            if (aligned && o.align() != 0 && st.arg != o.align()) {
              st.arg = o.align();
              ++s.alignments_corrected;
            }
          }
          if (!failed) {
            live_bytes -= o.bytes;
            delta -= o.bytes;
          } else {
            // The program kept the object, but in the replay the call may
            // succeed and move it: from here on the replay knows it by a
            // new ref that this step produces, so that a later consumer on
            // another thread waits for this step and cannot free the old
            // block while it is being moved.
            if (s.max_id >= kMaxObjectId) inconsistent(e, "too many objects");
            ++s.max_id;
            id = take(k, e.time);
            kept->set_plan_id(id);
            kept->thread = k;
          }
        }
      }
      if (trace::op_produces(e.op) && !(e.flags & trace::kNullResult)) {
        if (e.id == 0 || e.id > kMaxObjectId) inconsistent(e, "object id " + std::to_string(e.id) + " is out of range");
        if (e.id <= trace_max_id || (complete && e.id != trace_max_id + 1))
          inconsistent(e, "object " + std::to_string(e.id) + " is out of order (expected " +
                              std::to_string(trace_max_id + 1) + ")");
        trace_max_id = e.id;
        ++s.objects;
        // Replay ids are dense in order of creation (trace ids have gaps
        // where a truncated trace lost chunks).
        if (s.max_id >= kMaxObjectId) inconsistent(e, "too many objects");
        ++s.max_id;
        id = take(k, e.time);
        const uint64_t b = e.requested_bytes();
        live.put(e.id, Live{b, id, aligned ? st.arg : 0, k});
        live_bytes += b;
        delta += b;
        requested += b;
        if (saturate(live_bytes) > s.live_bytes_peak) {
          s.live_bytes_peak = saturate(live_bytes);
          if (opt.live_limit != 0 && s.live_bytes_peak > opt.live_limit)
            throw PlanLiveLimit(s.live_bytes_peak, s.events, r.event_count(), opt.live_limit);
          s.peak_thread = k;
          at_peak = true;
        }
      } else if (e.id != 0) {
        inconsistent(e, "object id " + std::to_string(e.id) + " given for a call without result");
      }
      // A recorded resident-page count: the touch_object step follows.
      std::optional<uint64_t> pages;
      if (id != 0 && trace::op_produces(e.op) && !(e.flags & trace::kNullResult) && sh.object_pages != 0)
        pages = object_pages(e.id);
      const bool timed = timed_seq == e.seq;
      if (timed) timed_by_op[uint8_t(e.op)].add(timed_ns);
      const uint8_t flags = uint8_t(e.flags | (pages ? kStepTouchFollows : 0) | (timed ? kStepProgramTimed : 0));
      st.head = static_cast<uint64_t>(e.op) | uint64_t{flags} << 8 | id << 16;
      st.old = old;
      // The object whose address the event names: the one it produced (a
      // realloc that failed in the trace: the object, where the replay's
      // call left it), else the one it consumed.
      if (event_refs) event_refs->back() = id != 0 ? id : old;
      put(k, st, e.time, delta);
      if (give_old) slots.give(old, k, table[k].steps - 1);
      if (at_peak) s.peak_step = table[k].steps - 1;
      ++s.ops[static_cast<unsigned>(e.op)];
      if (pages) {
        Step t{};
        t.head = kStepTouchObject;
        t.old = id;
        t.size = std::min<uint64_t>(*pages * kPage, page_up(e.requested_bytes()));
        put(k, t, e.time, 0);
        ++s.memory_ops[kStepTouchObject - kStepMap];
        ++s.recorded_touches;
      }
    }
  }
  memory_until(UINT64_MAX);
  for (const auto& [op, h] : timed_by_op)
    s.program_latency.push_back(
        ProgramLatency{op, h.count(), h.mean(), h.quantile(0.5).high, h.quantile(0.9).high, h.quantile(0.99).high});
  s.live_bytes_end = saturate(live_bytes);
  s.bytes_requested = saturate(requested);

  PlanHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kPlanVersion;
  h.threads = s.replay_threads;
  h.max_id = s.max_id;
  h.slots = s.slots = slots.slots();
  s.slots_retired = slots.retired();
  s.handoffs = slots.handoffs();
  h.total_steps = s.steps;
  h.has_times = s.has_times;
  h.has_live = s.has_live;
  h.live_peak = s.live_bytes_peak;
  h.peak_step = s.peak_step;
  h.peak_thread = s.peak_thread;
  std::copy(s.ops.begin(), s.ops.end(), h.ops);
  std::copy(s.memory_ops.begin(), s.memory_ops.end(), h.memory_ops);
  for (size_t k = 0; k < nthreads; ++k) flush(k);
  writer.finish();
  for (size_t k = 0; k < nthreads; ++k) {
    const uint64_t n = table[k].steps, c = cap[k];
    plan.punch(table[k].steps_offset + n * sizeof(PlanStep), table[k].steps_offset + c * sizeof(PlanStep));
    if (s.has_times) plan.punch(table[k].times_offset + n * 8, table[k].times_offset + c * 8);
    if (s.has_live) plan.punch(table[k].live_offset + n * 8, table[k].live_offset + c * 8);
  }
  plan.write(0, &h, sizeof h);
  plan.write(sizeof h, table.data(), table.size() * sizeof(PlanThread));
  return plan.release();
}

namespace {

// All of [at, at + n) of `fd` into `to`: "" or why not.
std::string pread_all(int fd, char* to, uint64_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t got = pread(fd, to, n, off_t(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got < 0 ? std::strerror(errno) : "the file ends before it";
    to += got;
    at += uint64_t(got);
    n -= uint64_t(got);
  }
  return "";
}

}  // namespace

uint64_t plan_chunk_sum(const void* data, size_t bytes, uint32_t t, uint64_t chunk, PlanArray a) {
  return XXH3_64bits_withSeed(data, bytes, uint64_t{t} << 40 ^ chunk << 2 ^ uint64_t(a));
}

std::string plan_sums_damage(int fd, const MappedPlan& plan, unsigned threads) {
  // Read with pread, 512 chunks (4 MiB of steps) at a time into a buffer
  // per thread, not through the mapping: a file cut short or a page that
  // cannot be read is a plan to build again (not SIGBUS), and no plan pages
  // stay in this process's memory.
  constexpr uint64_t kPiece = 512;
  struct Piece {
    uint32_t thread;
    PlanArray array;
    uint64_t first, last;  // chunks
  };
  std::vector<Piece> pieces;
  for (uint32_t t = 0; t < plan.threads(); ++t)
    for (PlanArray a : {PlanArray::steps, PlanArray::times, PlanArray::live}) {
      if (!plan.sums(t, a)) continue;
      const uint64_t chunks = plan_sum_count(plan.step_count(t));
      for (uint64_t c = 0; c < chunks; c += kPiece) pieces.push_back(Piece{t, a, c, std::min(chunks, c + kPiece)});
    }
  const auto* base = static_cast<const char*>(plan.base());
  const auto offset_of = [&](const void* p) { return uint64_t(static_cast<const char*>(p) - base); };
  const auto read_at = [&](char* to, uint64_t n, uint64_t at) { return pread_all(fd, to, n, at); };
  std::atomic<size_t> next{0};
  std::mutex m;
  std::pair<size_t, std::string> first{SIZE_MAX, ""};  // the damaged piece that comes first, and its damage named
  const auto work = [&] {
    std::vector<char> data(kPiece * kPlanSumEntries * sizeof(PlanStep));
    std::vector<uint64_t> sums(kPiece);
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < pieces.size();) {
      const Piece& p = pieces[i];
      const size_t width = p.array == PlanArray::steps ? sizeof(PlanStep) : 8;
      const void* array = p.array == PlanArray::steps   ? static_cast<const void*>(plan.steps(p.thread))
                          : p.array == PlanArray::times ? static_cast<const void*>(plan.times(p.thread))
                                                        : static_cast<const void*>(plan.live(p.thread));
      const uint64_t entries = plan.step_count(p.thread);
      const uint64_t lo = p.first * kPlanSumEntries, hi = std::min(entries, p.last * kPlanSumEntries);
      std::string damage = read_at(data.data(), (hi - lo) * width, offset_of(array) + lo * width);
      if (damage.empty())
        damage = read_at(reinterpret_cast<char*>(sums.data()), (p.last - p.first) * 8,
                         offset_of(plan.sums(p.thread, p.array) + p.first));
      if (!damage.empty()) {
        damage = "plan: thread " + std::to_string(p.thread) + " steps " + std::to_string(lo) + " to " +
                 std::to_string(hi - 1) + " cannot be read: " + damage;
      } else {
        for (uint64_t c = p.first; c < p.last; ++c) {
          const uint64_t from = c * kPlanSumEntries, to = std::min(entries, from + kPlanSumEntries);
          if (plan_chunk_sum(data.data() + (from - lo) * width, (to - from) * width, p.thread, c, p.array) ==
              sums[c - p.first])
            continue;
          damage = "plan: thread " + std::to_string(p.thread) + " steps " + std::to_string(from) + " to " +
                   std::to_string(to - 1) + " do not match their checksum (" +
                   (p.array == PlanArray::steps   ? "the steps"
                    : p.array == PlanArray::times ? "their recorded times"
                                                  : "their live bytes") +
                   ": the plan's file was changed after it was built)";
          break;
        }
      }
      if (!damage.empty()) {
        std::lock_guard l(m);
        if (i < first.first) first = {i, std::move(damage)};
      }
    }
  };
  std::vector<std::thread> helpers;
  for (unsigned k = 1; k < threads && k < pieces.size(); ++k) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // (no thread to be had: this one does it all)
    }
  }
  work();
  for (std::thread& h : helpers) h.join();
  return first.second;
}

uint64_t plan_head_hash(int fd) {
  PlanHeader h{};
  struct stat st {};
  if (fstat(fd, &st) != 0 || pread(fd, &h, sizeof h, 0) != ssize_t(sizeof h) ||
      std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    throw PlanError("plan: not a replay plan");
  if (sizeof h + uint64_t(h.threads) * sizeof(PlanThread) > uint64_t(st.st_size))
    throw PlanError("plan: its thread table is cut short");
  std::string head(sizeof h + uint64_t(h.threads) * sizeof(PlanThread), '\0');
  if (!pread_all(fd, head.data(), head.size(), 0).empty()) throw PlanError("plan: its thread table is cut short");
  return XXH3_64bits(head.data(), head.size());
}

MappedPlan::MappedPlan(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw PlanError(std::string("plan: ") + std::strerror(errno));
  len_ = static_cast<size_t>(st.st_size);
  if (len_ < sizeof(PlanHeader)) throw PlanError("plan: too short to be a replay plan");
  // Not populated: the replayer maps windows of it as the replay goes
  // (replay/plan_pager.h).
  map_ = mmap(nullptr, len_, PROT_READ, MAP_SHARED, fd, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw PlanMapError(std::string("plan: mmap: ") + std::strerror(errno));
  }
  // A kept plan cut short under the mapping (by another program) ends the
  // replayer with a line naming it, not "Bus error".
  char path[4096];
  const ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), path, sizeof path - 1);
  trace::guard_mapping(map_, len_, n > 0 ? "the replay plan " + std::string(path, size_t(n)) : "the replay plan");
  try {
    load();
  } catch (...) {
    trace::unguard_mapping(map_);
    munmap(map_, len_);
    map_ = nullptr;
    throw;
  }
}

void MappedPlan::load() {
  const auto* base = static_cast<const char*>(map_);
  PlanHeader h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kPlanVersion)
    throw PlanError("plan: not a heaplab replay plan of version " + std::to_string(kPlanVersion));
  if (h.threads == 0 && h.total_steps != 0) throw PlanError("plan: steps without threads");
  if (h.max_id > kMaxObjectId) throw PlanError("plan: object ids beyond 2^48");
  if (h.slots > kMaxSlot) throw PlanError("plan: more table slots than 2^32");
  if (sizeof h + uint64_t{h.threads} * sizeof(PlanThread) > len_) throw PlanError("plan: thread table past the end");
  threads_ = h.threads;
  max_id_ = h.max_id;
  slots_ = h.slots;
  total_steps_ = h.total_steps;
  times_ = h.has_times;
  live_ = h.has_live;
  std::copy(h.ops, h.ops + trace::kOpCount, ops_.begin());
  std::copy(h.memory_ops, h.memory_ops + kMemorySteps, memory_ops_.begin());
  uint64_t sum = 0, sum_bytes = 0;
  for (uint32_t k = 0; k < threads_; ++k) {
    PlanThread t;
    std::memcpy(&t, base + sizeof h + k * sizeof t, sizeof t);
    const auto fits = [&](uint64_t off, uint64_t n, uint64_t width) {
      return off % 8 == 0 && off <= len_ && n <= (len_ - off) / width;
    };
    const uint64_t arrays = 1 + (times_ ? 1 : 0) + (live_ ? 1 : 0);
    if (!fits(t.steps_offset, t.steps, sizeof(PlanStep)) ||
        (times_ && !fits(t.times_offset, t.steps, sizeof(uint64_t))) ||
        (live_ && !fits(t.live_offset, t.steps, sizeof(int64_t))) || t.sums_stride < plan_sum_count(t.steps) ||
        t.sums_stride > UINT64_MAX / 8 / arrays || !fits(t.sums_offset, arrays * t.sums_stride, 8))
      throw PlanError("plan: thread " + std::to_string(k) + "'s arrays lie past the end");
    steps_.push_back(reinterpret_cast<const PlanStep*>(base + t.steps_offset));
    time_.push_back(times_ ? reinterpret_cast<const uint64_t*>(base + t.times_offset) : nullptr);
    livearr_.push_back(live_ ? reinterpret_cast<const int64_t*>(base + t.live_offset) : nullptr);
    const auto* sums = reinterpret_cast<const uint64_t*>(base + t.sums_offset);
    sums_.push_back(
        {sums, times_ ? sums + t.sums_stride : nullptr, live_ ? sums + (times_ ? 2 : 1) * t.sums_stride : nullptr});
    counts_.push_back(t.steps);
    sum += t.steps;
    sum_bytes += arrays * plan_sum_count(t.steps) * 8;
  }
  if (sum != total_steps_) throw PlanError("plan: thread step counts do not add up");
  if (h.peak_step != kNoPeak && (h.peak_thread >= threads_ || h.peak_step >= counts_[h.peak_thread]))
    throw PlanError("plan: the live peak's step is not in the plan");
  peak_thread_ = h.peak_thread;
  peak_step_ = h.peak_step;
  live_peak_ = h.live_peak;
  stored_ = sizeof h + uint64_t{threads_} * sizeof(PlanThread) + total_steps_ * step_bytes() + sum_bytes;
}

MappedPlan::~MappedPlan() {
  if (map_) {
    trace::unguard_mapping(map_);
    munmap(map_, len_);
  }
}

}  // namespace heaplab::replay
