// Tests of normalising while the raw files are written (LiveRawFile,
// normalise_live). A fake shim in the test writes the files exactly as the
// real one lays them out (raw_format.h: a shared mapping of per-thread
// blocks, full blocks appended to .blocks with the index reserved first),
// a batch at a time from normalise_live's `ended` callback, so every
// interleaving of writing and reading is deterministic. The live trace must
// hold the same events as the trace normalised afterwards from the same files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <fstream>
#include <string>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_testutil.h"
#include "capture/normalise/normalise.h"
#include "capture/normalise/raw_live.h"
#include "capture/normalise/raw_reader.h"
#include "capture/shim/raw_format.h"

namespace heaplab::normalise {
namespace {

using trace::Event;
using trace::Op;
using trace::testutil::TempDir;

constexpr uint64_t kStart = 1000;

// Writes a raw capture as the shim does: records into each thread's block in
// the mapping (head last); a full block is appended to .blocks when the
// thread's next record comes. With `slow_appends`, the block's index is
// reserved at once but its pwrite, clearing and the thread's next block wait
// for the next batch (a thread preempted inside the shim's append). With
// `publish` (1; 2: every other full block of a thread, the rest appended),
// while the reader consumes, a full block stays in the mapping and the
// thread moves to a block the reader gave back (raw::FreeBlocks), else to a
// new slot, as the shim's publish_block does. With `clear_first`
// (set_clear_first), a full block's index is reserved and the block cleared
// from the mapping at once, and written to .blocks (from a copy) in the next
// batch: a reader then finds it nowhere, as one that polls the slot after the
// shim cleared it but read the index before the shim's pwrite landed.
class FakeShim {
 public:
  FakeShim(const std::string& path, uint32_t threads, bool slow_appends, int publish = 0)
      : path_(path), threads_(threads), slow_(slow_appends), publish_(publish) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    data_fd_ = ::open((path + ".blocks").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const uint64_t size = raw::kBlockSize * (1 + raw::kBlocksPerSegment);
    EXPECT_EQ(ftruncate(fd_, off_t(size)), 0);
    map_ = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    header_ = reinterpret_cast<raw::FileHeader*>(map_);
    header_->version = raw::kVersion;
    header_->header_size = header_->block_size = uint32_t(raw::kBlockSize);
    header_->record_size = uint32_t(raw::kRecordSize);
    header_->pid = 4321;
    header_->clock = raw::kClockMonotonic;
    header_->start_ticks = kStart;
    std::memcpy(header_->magic, raw::kFileMagic, sizeof header_->magic);
    state_.resize(threads);
    for (uint32_t t = 0; t < threads; ++t) state_[t].cur = t;
  }
  ~FakeShim() {
    munmap(map_, raw::kBlockSize * (1 + raw::kBlocksPerSegment));
    ::close(fd_);
    ::close(data_fd_);
  }

  // One record of thread t; false if the thread is inside a slow append.
  bool emit(uint32_t t, const raw::Record& r) {
    State& s = state_[t];
    if (s.appending) return false;
    if (!s.started) {
      s.started = true;
      __atomic_store_n(&header_->next_thread, std::max(header_->next_thread, t + 1), __ATOMIC_RELEASE);
      start_block(t);
    }
    if (s.used == raw::kRecordsPerBlock && publish_block(t)) {
      // (left in the mapping: the thread goes on in its new block)
    } else if (s.used == raw::kRecordsPerBlock) {
      s.index = __atomic_fetch_add(&header_->data_blocks, 1u, __ATOMIC_RELAXED);
      s.appending = true;
      if (clear_first_) {
        s.copy.assign(block(t), block(t) + raw::kBlockSize);
        clear(t);
        return false;
      }
      if (slow_) return false;
      finish_append(t);
    }
    auto* rec = reinterpret_cast<raw::Record*>(block(t) + raw::kBlockHeaderSize) + s.used;
    rec->a = r.a;
    rec->b = r.b;
    rec->c = r.c;
    __atomic_store_n(&rec->head, r.head, __ATOMIC_RELEASE);
    ++s.used;
    return true;
  }
  // A record of thread t's block reserved and never written (the thread
  // died inside the shim; or, here, went on): a hole before its next one.
  void hole(uint32_t t) { ++state_[t].used; }
  // A record reserved and not yet written (a signal handler interrupted the
  // write and writes its own records next): written later by fill().
  void reserve(uint32_t t) { state_[t].reserved.push_back(state_[t].used++); }
  void fill(uint32_t t, const raw::Record& r) {
    State& s = state_[t];
    ASSERT_FALSE(s.reserved.empty());
    auto* rec = reinterpret_cast<raw::Record*>(block(t) + raw::kBlockHeaderSize) + s.reserved.front();
    s.reserved.pop_front();
    rec->a = r.a;
    rec->b = r.b;
    rec->c = r.c;
    __atomic_store_n(&rec->head, r.head, __ATOMIC_RELEASE);
  }
  // A record whose other words were written and its head never (the thread
  // died inside the shim, after its last complete record).
  void torn(uint32_t t) {
    State& s = state_[t];
    auto* rec = reinterpret_cast<raw::Record*>(block(t) + raw::kBlockHeaderSize) + s.used;
    rec->a = 0xdead0000 + t;
    rec->b = 77;
    rec->c = 78;
    ++s.used;
  }
  // Thread t has ended in its current block: what the shim counts as it
  // begins to end, and the exit word as the kernel leaves it.
  void end_thread(uint32_t t) {
    __atomic_fetch_add(&header_->threads_ended, 1u, __ATOMIC_ACQ_REL);
    auto* h = reinterpret_cast<raw::BlockHeader*>(block(t));
    __atomic_store_n(&h->exit_word, (100 + t) | raw::kExitOwnerDied, __ATOMIC_RELEASE);
    ended_slot_ = state_[t].cur;
  }
  // Whether a thread went on in the block an ended thread left.
  bool ended_block_reused() const { return ended_reused_; }
  // The slow appends of the last batch complete.
  void next_batch() {
    for (uint32_t t = 0; t < threads_; ++t)
      if (state_[t].appending) finish_append(t);
  }
  uint64_t appended() const { return header_->data_blocks + free_blocks()->published; }
  uint64_t taken_back() const { return taken_back_; }  // blocks reused from the reader's ring
  uint32_t slots() const { return header_->next_thread; }
  uint64_t consumed() const { return __atomic_load_n(&header_->consumed_blocks, __ATOMIC_ACQUIRE); }
  void set_clear_first(bool on) { clear_first_ = on; }

 private:
  struct State {
    bool started = false, appending = false;
    uint64_t seq = 0, used = 0, index = 0;
    uint32_t cur = 0;               // the slot of the thread's current block
    uint64_t fulls = 0;             // its blocks filled
    std::vector<uint8_t> copy;      // clear_first: the full block, to write to .blocks
    std::deque<uint64_t> reserved;  // records reserve() left for fill(), in the current block
  };
  raw::FreeBlocks* free_blocks() const { return reinterpret_cast<raw::FreeBlocks*>(map_ + raw::kFreeBlocksOffset); }
  uint8_t* block(uint32_t t) { return map_ + raw::kBlockSize * (state_[t].cur + 1); }
  bool publish_block(uint32_t t) {
    if (!publish_ || __atomic_load_n(&header_->consumer_ns, __ATOMIC_ACQUIRE) == 0) return false;
    if (publish_ == 2 && state_[t].fulls++ % 2 == 1) return false;
    raw::FreeBlocks* f = free_blocks();
    uint32_t slot;
    const uint64_t head = __atomic_load_n(&f->head, __ATOMIC_ACQUIRE);
    if (head < __atomic_load_n(&f->tail, __ATOMIC_ACQUIRE)) {
      slot = f->index[head % raw::kFreeBlocksMax];
      __atomic_store_n(&f->head, head + 1, __ATOMIC_RELEASE);
      ++taken_back_;
      ended_reused_ |= slot == ended_slot_;
    } else if (header_->next_thread < raw::kBlocksPerSegment) {
      slot = __atomic_fetch_add(&header_->next_thread, 1u, __ATOMIC_ACQ_REL);
    } else {
      return false;  // (the mapping is full: append)
    }
    // Its header zeroed and every record's head (the reader zeroes the
    // records written, and the rest were never completed: a torn one's
    // other words may stay, raw_format.h), as the shim's fast path needs.
    const uint8_t* given = map_ + raw::kBlockSize * (slot + 1);
    const uint8_t* dirty = std::find_if(given, given + raw::kBlockHeaderSize, [](uint8_t b) { return b != 0; });
    EXPECT_EQ(dirty, given + raw::kBlockHeaderSize)
        << "a block given back has a header byte set at offset " << (dirty - given) << " of slot " << slot;
    const auto* recs = reinterpret_cast<const raw::Record*>(given + raw::kBlockHeaderSize);
    for (uint64_t i = 0; i < raw::kRecordsPerBlock; ++i)
      if (recs[i].head != 0) {
        ADD_FAILURE() << "a block given back has record " << i << " complete, in slot " << slot;
        break;
      }
    __atomic_fetch_add(&f->published, 1u, __ATOMIC_RELEASE);
    state_[t].cur = slot;
    start_block(t);
    return true;
  }
  void start_block(uint32_t t) {
    auto* h = reinterpret_cast<raw::BlockHeader*>(block(t));
    h->thread = t;
    h->thread_block_seq = state_[t].seq++;
    h->tid = 100 + t;
    std::snprintf(h->name, sizeof h->name, "worker%u", t);
    __atomic_store_n(&h->magic, raw::kBlockMagic, __ATOMIC_RELEASE);
    state_[t].used = 0;
  }
  void finish_append(uint32_t t) {
    State& s = state_[t];
    const uint8_t* from = s.copy.empty() ? block(t) : s.copy.data();
    ASSERT_EQ(pwrite(data_fd_, from, raw::kBlockSize, off_t(s.index * raw::kBlockSize)), ssize_t(raw::kBlockSize));
    if (s.copy.empty()) clear(t);
    s.copy.clear();
    s.appending = false;
    start_block(t);
  }
  void clear(uint32_t t) {  // the magic first, as the shim does
    auto* h = reinterpret_cast<raw::BlockHeader*>(block(t));
    __atomic_store_n(&h->magic, 0u, __ATOMIC_RELEASE);
    std::memset(block(t) + sizeof(uint32_t), 0, raw::kBlockSize - sizeof(uint32_t));
  }

  std::string path_;
  uint32_t threads_;
  bool slow_;
  int publish_;
  bool clear_first_ = false;
  uint64_t taken_back_ = 0;
  uint32_t ended_slot_ = UINT32_MAX;
  bool ended_reused_ = false;
  int fd_ = -1, data_fd_ = -1;
  uint8_t* map_ = nullptr;
  raw::FileHeader* header_ = nullptr;
  std::vector<State> state_;
};

struct Step {
  uint32_t thread;
  raw::Record rec;    // head 0: the thread ends here (FakeShim::end_thread), or with a = kHole, a hole
                      // (kTorn: a torn record; kReserve: one reserved, written by a later `fill` step)
  bool fill = false;  // rec goes into the thread's oldest reserved record
};
constexpr uint64_t kHole = 1, kTorn = 2, kReserve = 3;

// A program of 3 threads: each allocates and frees, and hands a share of its
// objects to the next thread to free; addresses are reused once freed. Ticks
// rise by one per record, in the order the records are listed.
std::vector<Step> script(uint64_t records_per_thread) {
  std::vector<Step> out;
  std::vector<std::deque<uint64_t>> own(3), handed(3);
  uint64_t ticks = kStart + 10, next_addr = 0x10000;
  std::vector<uint64_t> free_addrs;
  auto take_addr = [&] {
    if (!free_addrs.empty()) {
      const uint64_t a = free_addrs.back();
      free_addrs.pop_back();
      return a;
    }
    return next_addr += 0x40;
  };
  for (uint64_t i = 0; i < records_per_thread; ++i) {
    for (uint32_t t = 0; t < 3; ++t) {
      const uint64_t r = (i * 7 + t * 13) % 10;
      if (r < 5 || own[t].empty()) {
        const uint64_t a = take_addr();
        out.push_back({t, raw::Record{raw::record_head(uint32_t(Op::malloc), ticks++), a, 16 + r * 8, 0}});
        (r == 3 ? handed[(t + 1) % 3] : own[t]).push_back(a);
      } else {
        std::deque<uint64_t>& q = !handed[t].empty() && r > 7 ? handed[t] : own[t];
        if (q.empty()) continue;
        const uint64_t a = q.front();
        q.pop_front();
        out.push_back({t, raw::Record{raw::record_head(uint32_t(Op::free), ticks++), a, 0, 0}});
        free_addrs.push_back(a);
      }
    }
  }
  return out;
}

std::vector<Event> read_events(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  std::vector<Event> all = trace::testutil::read_all(*r), out;
  for (Event& e : all) {
    if (e.op == Op::thread_end) continue;  // live: written once the image ended
    e.seq = 0;
    e.time = 0;
    out.push_back(e);
  }
  return out;
}

bool same(const Event& a, const Event& b) {
  return a.op == b.op && a.thread == b.thread && a.id == b.id && a.old == b.old && a.size == b.size &&
         a.flags == b.flags;
}

struct LiveRun {
  NormaliseReport rep;
  std::vector<Event> events;
  uint64_t polls = 0, appended = 0, consumed = 0;
  uint64_t taken_back = 0;         // published blocks the shim reused
  uint32_t slots = 0;              // block slots the mapping held at the end
  uint64_t most_unconsumed = 0;    // appended blocks not yet consumed, at worst
  uint64_t blocks_disk_bytes = 0;  // .blocks's allocated size at the end
  uint64_t threads_gone = 0;       // the reader's LiveRawFile::threads_gone
  bool ended_block_reused = false;
  std::vector<uint64_t> buffers;  // the cursors' buffers held (LiveRawFile::buffers_held) at each poll
};

// Writes `steps` through a FakeShim, `batch` records per call of `ended`,
// normalising live into DIR/live.hlt.
LiveRun run_live(const TempDir& dir, const std::vector<Step>& steps, size_t batch, bool slow, bool consume,
                 int publish = 0, const NormaliseOptions& opt = {}, bool clear_first = false,
                 std::optional<std::chrono::nanoseconds> idle_limit = std::nullopt) {
  const std::string path = dir.file("4321.0.hlraw");
  FakeShim shim(path, 3, slow, publish);
  shim.set_clear_first(clear_first);
  LiveRawFile raw(path, consume);
  if (idle_limit) raw.set_idle_limit(*idle_limit);
  LiveRun out;
  size_t next = 0;
  std::vector<Step> waiting;  // records of threads inside a slow append
  auto ended = [&] {
    ++out.polls;
    out.buffers.push_back(raw.buffers_held());
    out.most_unconsumed = std::max(out.most_unconsumed, shim.appended() - shim.consumed());
    shim.next_batch();
    std::vector<Step> retry;
    retry.swap(waiting);
    for (const Step& s : retry)
      if (!shim.emit(s.thread, s.rec)) waiting.push_back(s);
    for (size_t n = 0; n < batch && next < steps.size(); ++n, ++next) {
      if (steps[next].fill) {
        shim.fill(steps[next].thread, steps[next].rec);
        continue;
      }
      if (steps[next].rec.head == 0) {
        if (steps[next].rec.a == kHole)
          shim.hole(steps[next].thread);
        else if (steps[next].rec.a == kReserve)
          shim.reserve(steps[next].thread);
        else if (steps[next].rec.a == kTorn)
          shim.torn(steps[next].thread);
        else
          shim.end_thread(steps[next].thread);
        continue;
      }
      // A thread's records stay in order: behind one that waits, they wait too.
      bool blocked = false;
      for (const Step& w : waiting) blocked |= w.thread == steps[next].thread;
      if (blocked || !shim.emit(steps[next].thread, steps[next].rec)) waiting.push_back(steps[next]);
    }
    return next == steps.size() && waiting.empty() && out.polls > 2;
  };
  out.rep = normalise_live(raw, dir.file("live.hlt"), opt, ended, [] { return nlohmann::json::object(); });
  out.events = read_events(dir.file("live.hlt"));
  out.appended = shim.appended();
  out.consumed = shim.consumed();
  out.taken_back = shim.taken_back();
  out.slots = shim.slots();
  out.threads_gone = raw.threads_gone();
  out.ended_block_reused = shim.ended_block_reused();
  struct stat st;
  if (stat((path + ".blocks").c_str(), &st) == 0) out.blocks_disk_bytes = uint64_t(st.st_blocks) * 512;
  return out;
}

std::vector<Event> normalise_after(const TempDir& dir) {
  RawFile f(dir.file("4321.0.hlraw"));
  normalise(f, dir.file("after.hlt"), NormaliseOptions{});
  return read_events(dir.file("after.hlt"));
}

void expect_same(const std::vector<Event>& live, const std::vector<Event>& after) {
  ASSERT_EQ(live.size(), after.size());
  for (size_t i = 0; i < live.size(); ++i)
    ASSERT_TRUE(same(live[i], after[i])) << "event " << i << ": live op " << trace::op_name(live[i].op) << " t"
                                         << live[i].thread << " id " << live[i].id << " old " << live[i].old
                                         << ", after op " << trace::op_name(after[i].op) << " t" << after[i].thread
                                         << " id " << after[i].id << " old " << after[i].old;
}

TEST(LiveNormalise, SameEventsAsAfterTheFact) {
  const std::vector<Step> steps = script(30000);  // about 14 blocks per thread
  for (size_t batch : {size_t(1000), size_t(2046), size_t(5000)}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    TempDir dir;
    LiveRun live = run_live(dir, steps, batch, false, false);
    EXPECT_EQ(live.rep.records, steps.size());
    EXPECT_EQ(live.rep.calls, steps.size());
    EXPECT_EQ(live.rep.unknown_frees, 0u);
    EXPECT_EQ(live.rep.reused_live, 0u);
    EXPECT_EQ(live.rep.holes, 0u);
    EXPECT_EQ(live.rep.threads, 3u);
    EXPECT_GT(live.appended, 30u);
    EXPECT_EQ(live.consumed, 0u);  // the raw files stay whole
    expect_same(live.events, normalise_after(dir));
  }
}

// While the program keeps every core busy (here: said so for the first 30
// polls of about 90), chunks are compressed at busy_level; the events are
// the same; once the program has ended, what is left takes `level`.
TEST(LiveNormalise, BusyLevelWhileTheProgramKeepsTheCoresBusy) {
  const std::vector<Step> steps = script(30000);
  auto run = [&](const TempDir& dir, uint64_t busy_polls) {
    NormaliseOptions opt;
    opt.chunk_events = 2048;  // chunks written all along
    opt.level = 19;
    opt.busy_level = 1;
    auto asked = std::make_shared<uint64_t>(0);
    opt.busy = [asked, busy_polls] { return ++*asked <= busy_polls; };
    return run_live(dir, steps, 1000, false, false, 0, opt);
  };
  TempDir some, all, none;
  const LiveRun r = run(some, 30);
  EXPECT_GT(r.rep.busy_level_events, 15000u);
  EXPECT_LT(r.rep.busy_level_events, 40000u);
  EXPECT_EQ(r.rep.busy_level_events % 2048, 0u);  // whole chunks
  expect_same(r.events, normalise_after(some));

  const LiveRun a = run(all, UINT64_MAX), n = run(none, 0);
  // Busy throughout: every chunk but those filled once the program ended
  // (the records after the last poll: about one batch of 1,000) and those
  // still open then (one a thread, each under 2,048 events).
  EXPECT_GT(a.rep.busy_level_events, a.rep.events - 3 * 2048 - 2 * 1000);
  EXPECT_LT(a.rep.busy_level_events, a.rep.events);
  EXPECT_EQ(n.rep.busy_level_events, 0u);
  expect_same(a.events, n.events);
  expect_same(r.events, n.events);
  // The same chunks, compressed at 1 or at 19: those that differ hold
  // exactly the events counted at level 1; those written once the program
  // ended (the tail, and the chunks still open) are alike.
  const auto ca = trace::testutil::chunk_payloads(trace::testutil::read_file(all.file("live.hlt")));
  const auto cn = trace::testutil::chunk_payloads(trace::testutil::read_file(none.file("live.hlt")));
  ASSERT_EQ(ca.size(), cn.size());
  uint64_t differ = 0, alike = 0;
  for (size_t i = 0; i < ca.size(); ++i) (ca[i] == cn[i] ? alike : differ) += trace::testutil::chunk_events(ca[i]);
  EXPECT_EQ(differ, a.rep.busy_level_events);
  EXPECT_EQ(differ + alike, a.rep.events);
  EXPECT_FALSE(ca.empty() || ca.back() != cn.back());
}

// A busy level out of range is refused before anything is read, not on
// the writer's thread once the program gets busy.
TEST(LiveNormalise, BadBusyLevelRefusedAtTheStart) {
  TempDir dir;
  NormaliseOptions opt;
  opt.busy_level = 23;
  try {
    run_live(dir, script(10), 1000, false, false, 0, opt);
    FAIL();
  } catch (const trace::TraceError& e) {
    EXPECT_EQ(std::string(e.what()), dir.file("live.hlt") + ": zstd level must be between 1 and 22");
  }
}

TEST(LiveNormalise, SlowAppendsKeepTheOrder) {
  // A thread's full block is counted in .blocks before it is written; the
  // thread waits meanwhile and the reader must not pass it.
  const std::vector<Step> steps = script(30000);
  TempDir dir;
  LiveRun live = run_live(dir, steps, 1500, true, false);
  EXPECT_EQ(live.rep.records, steps.size());
  EXPECT_EQ(live.rep.reused_live, 0u);
  EXPECT_EQ(live.rep.unknown_frees, 0u);
  expect_same(live.events, normalise_after(dir));
}

// A thread's full block, part read, is cleared from the mapping before
// the reader finds its copy in .blocks: the thread is not caught up (the
// rest of the block was stamped before the poll), and the reader must not
// write another thread's later records first. (Taken for caught up, the
// other thread's 900 allocations came before the block's last 44 records.)
TEST(LiveNormalise, ABlockOnItsWayToTheAppendedFileHoldsTheOthersBack) {
  std::vector<Step> steps;
  uint64_t ticks = kStart + 10;
  for (uint64_t i = 0; i < raw::kRecordsPerBlock; ++i)
    steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::malloc), ticks++), 0x100000 + i * 64, 24, 0}});
  steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::free), ticks++), 0x100000, 0, 0}});
  ticks += 100000;  // well past the skew window
  for (uint64_t i = 0; i < 900; ++i)
    steps.push_back({1, raw::Record{raw::record_head(uint32_t(Op::malloc), ticks++), 0x900000 + i * 64, 40, 0}});
  ASSERT_EQ(steps.size(), 2044u + 1 + 900);
  // Polls after 1,000, 2,000 and 2,945 records: at the third, thread 0's
  // block is full and on its way, 2,000 of its records read.
  TempDir dir;
  LiveRun live = run_live(dir, steps, 1000, false, false, 0, NormaliseOptions{}, true);
  EXPECT_EQ(live.rep.records, steps.size());
  EXPECT_EQ(live.rep.threads, 2u);
  EXPECT_EQ(live.appended, 1u);
  expect_same(live.events, normalise_after(dir));
}

// A stream that resolve() processed ahead of its turn and that then ended
// (its thread gone, its last record that one) is freed at the next poll
// while its record's key is still in the merge's heap, past that poll's
// watermark: drain() skips the key. Thread 1's malloc returns the address
// thread 0 frees 5 ticks later (an unfenced clock's inversion): the free is
// taken first. Thread 2's block, part read and then on its way to .blocks,
// holds the watermark 3 ticks short of the free.
TEST(LiveNormalise, AStreamResolvedAheadThatEndsIsFreedWithItsKeyStillQueued) {
  constexpr uint64_t kX = 0x500000;
  std::vector<Step> steps;
  steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::malloc), 90000), kX, 32, 0}});
  uint64_t c = 100992 - 1098;  // thread 2's 1,099th record at 100992: the watermark 10,000 (the window) below
  for (uint64_t i = 0; i < 1099; ++i)
    steps.push_back({2, raw::Record{raw::record_head(uint32_t(Op::malloc), c++), 0x900000 + i * 64, 40, 0}});
  ASSERT_EQ(steps.size(), 1100u);                           // the first poll
  for (uint64_t i = 1099; i <= raw::kRecordsPerBlock; ++i)  // its block full, and one more: on its way
    steps.push_back({2, raw::Record{raw::record_head(uint32_t(Op::malloc), c++), 0x900000 + i * 64, 40, 0}});
  steps.push_back({1, raw::Record{raw::record_head(uint32_t(Op::malloc), 90990), kX, 48, 0}});
  steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::free), 90995), kX, 0, 0}});
  steps.push_back({0, raw::Record{0, 0, 0, 0}});  // thread 0 ends
  TempDir dir;
  LiveRun live = run_live(dir, steps, 1100, false, true, 0, NormaliseOptions{}, true);
  EXPECT_EQ(live.rep.records, steps.size() - 1);
  EXPECT_EQ(live.rep.threads, 3u);
  EXPECT_EQ(live.rep.reordered, 1u);  // the free, ahead of its turn
  EXPECT_EQ(live.rep.late, 1u);       // thread 1's malloc: 10,002 ticks before thread 2's latest
  EXPECT_EQ(live.rep.reused_live, 0u);
  EXPECT_EQ(live.rep.unknown_frees, 0u);
  EXPECT_EQ(live.threads_gone, 1u);
  // Thread 1's object is the second one at kX, made after thread 0's free.
  uint64_t at = 0;
  for (const Event& e : live.events)
    if (e.op == Op::free) {
      EXPECT_EQ(e.thread, 0u);
      EXPECT_EQ(e.old, 1u);
      at = 1;
    } else if (e.op == Op::malloc && e.size == 48) {
      EXPECT_EQ(at, 1u) << "thread 1's malloc came before thread 0's free";
    }
}

// A thread whose first unwritten record has a written one after it (a
// signal handler interrupted the write and recorded its own calls; the
// interrupted record is stamped no later than the handler's first) is not
// caught up until the record is written: the handler's free of an address,
// and the interrupted record, come before another thread's later reuse of
// the address. (Taken for caught up, thread 1's malloc came first: its
// address was still thread 0's object, and thread 0's free then freed
// thread 1's.)
TEST(LiveNormalise, ARecordWrittenAfterAnUnwrittenOneHoldsTheOthersBack) {
  constexpr uint64_t kA = 0x100000, kB = 0x200000, kC = 0x300000, kD = 0x400000, kE = 0x500000;
  auto rec = [](uint32_t op, uint64_t ticks, uint64_t a, uint64_t b) {
    return raw::Record{raw::record_head(op, ticks), a, b, 0};
  };
  const uint32_t mal = uint32_t(Op::malloc), fr = uint32_t(Op::free);
  const std::vector<Step> steps = {
      {0, rec(mal, 1000, kA, 24)},  // first poll
      {1, rec(mal, 1001, kC, 40)},         {1, rec(fr, 1002, kC, 0)},
      {0, raw::Record{0, kReserve, 0, 0}},  // second poll: thread 0 interrupted writing
      {0, rec(fr, 5000, kA, 0)},            // its handler's free
      {1, rec(mal, 30000, kA, 56)},         // thread 1 reuses the address
      {0, rec(mal, 4999, kB, 32), true},    // third poll: the interrupted record
      {1, rec(fr, 30001, kA, 0)},          {0, rec(fr, 30002, kB, 0)},
  };
  // A run of `batch` steps a poll, and the records it writes.
  auto check = [](const std::vector<Step>& run, size_t batch, uint64_t records) {
    TempDir dir;
    LiveRun live = run_live(dir, run, batch, false, false);
    EXPECT_EQ(live.rep.records, records);
    EXPECT_EQ(live.rep.reused_live, 0u);
    EXPECT_EQ(live.rep.unknown_frees, 0u);
    expect_same(live.events, normalise_after(dir));
  };
  check(steps, 3, 8);

  // Two unwritten in a row (the handler interrupted in turn, before its
  // first write, by another that recorded the free): held too.
  const std::vector<Step> nested = {
      {0, rec(mal, 1000, kA, 24)},  // first poll
      {1, rec(mal, 1001, kC, 40)},         {1, rec(fr, 1002, kC, 0)},
      {1, rec(mal, 1003, kD, 8)},          {0, raw::Record{0, kReserve, 0, 0}},  // second poll
      {0, raw::Record{0, kReserve, 0, 0}}, {0, rec(fr, 5000, kA, 0)},
      {1, rec(mal, 30000, kA, 56)},        {0, rec(mal, 4999, kB, 32), true},  // third poll
      {0, rec(mal, 4999, kE, 16), true},   {1, rec(fr, 30001, kA, 0)},
      {0, rec(fr, 30002, kB, 0)},          {0, rec(fr, 30003, kE, 0)},  // fourth poll
      {1, rec(fr, 30004, kD, 0)},
  };
  check(nested, 4, 12);
}

// A held record never written (a handler that never returned to the write):
// after kPendingLimit (100 ms) the reader reads past it as a hole and goes
// on with the thread, whose block is then kept, not given back.
TEST(LiveNormalise, AHeldRecordNeverWrittenBecomesAHole) {
  std::vector<Step> steps;
  steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::malloc), 1000), 0x100000, 24, 0}});
  steps.push_back({0, raw::Record{0, kReserve, 0, 0}});
  steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::malloc), 1002), 0x100040, 24, 0}});
  for (uint64_t i = 0; i < 300; ++i)  // 300 polls, a millisecond or more apart
    steps.push_back({1, raw::Record{raw::record_head(uint32_t(Op::malloc), 2000 + i), 0x900000 + i * 64, 40, 0}});
  TempDir dir;
  LiveRun live = run_live(dir, steps, 1, false, true);
  EXPECT_EQ(live.rep.records, 302u);
  EXPECT_EQ(live.rep.holes, 1u);
  EXPECT_EQ(live.consumed, 0u);  // (no block was full)
  expect_same(live.events, normalise_after(dir));
}

// A record that turns up after the trace was written past its stamp (here
// thread 0's, stamped long before thread 1's records already written: a
// thread preempted between its stamp and its write, or a reader that missed
// it) is counted as late, not ordered silently: the capture says so.
TEST(LiveNormalise, ARecordReadAfterLaterOnesIsCountedLate) {
  std::vector<Step> steps;
  for (uint64_t i = 0; i < 100; ++i)
    steps.push_back(
        {0, raw::Record{raw::record_head(uint32_t(Op::malloc), kStart + 10 + i), 0x100000 + i * 64, 24, 0}});
  for (uint64_t i = 0; i < 100; ++i)
    steps.push_back(
        {1, raw::Record{raw::record_head(uint32_t(Op::malloc), kStart + 100000 + i), 0x900000 + i * 64, 40, 0}});
  steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::malloc), kStart + 200), 0x200000, 24, 0}});
  for (uint64_t i = 100; i < 199; ++i)
    steps.push_back(
        {1, raw::Record{raw::record_head(uint32_t(Op::malloc), kStart + 100000 + i), 0x900000 + i * 64, 40, 0}});
  TempDir dir;
  LiveRun live = run_live(dir, steps, 100, false, false);  // polls after 100, 200 and 300 records
  EXPECT_EQ(live.rep.records, 300u);
  EXPECT_EQ(live.rep.late, 1u);
  // Afterwards, every record in its place: none late.
  RawFile f(dir.file("4321.0.hlraw"));
  EXPECT_EQ(normalise(f, dir.file("after.hlt"), NormaliseOptions{}).late, 0u);
}

// Records stamped after the clock the reader read before its poll wait for
// a later poll, even where no thread holds them back: a thread the poll did
// not yet number stamps its first record after that clock too, and may come
// before them. (Here thread 0's records, stamped an hour ahead of the real
// clock, would all be written at the first poll, before thread 1's, which
// starts after it and lies among them.)
TEST(LiveNormalise, RecordsStampedAfterThePollWaitForAThreadNotYetNumbered) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t ahead = uint64_t(ts.tv_sec + 3600) * 1000000000u;
  std::vector<Step> steps;
  for (uint64_t i = 0; i < 100; ++i)
    steps.push_back(
        {0, raw::Record{raw::record_head(uint32_t(Op::malloc), ahead + i * 1000), 0x100000 + i * 64, 24, 0}});
  steps.push_back({1, raw::Record{raw::record_head(uint32_t(Op::malloc), ahead + 50500), 0x900000, 40, 0}});
  TempDir dir;
  LiveRun live = run_live(dir, steps, 100, false, false);
  EXPECT_EQ(live.rep.records, 101u);
  EXPECT_EQ(live.rep.threads, 2u);
  const std::vector<Event> after = normalise_after(dir);
  ASSERT_EQ(after.size(), 103u);              // (two thread_starts)
  EXPECT_EQ(after[52].op, Op::thread_start);  // thread 1, after thread 0's 51st allocation
  EXPECT_EQ(after[52].thread, 1u);
  expect_same(live.events, after);
}

// A consuming reader's heartbeat is there as soon as it has opened the
// raw file, before its first poll (until the shim sees one, it appends
// every full block to .blocks); a reader that keeps the raw files sets none.
// So is the mark that a reader has opened the file (the shim appends at
// most raw::kLivePreReaderBlocks before it), which stays.
// A raw file's header as it is on disk now.
raw::FileHeader header_of(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  raw::FileHeader h{};
  EXPECT_EQ(pread(fd, &h, sizeof h, 0), ssize_t(sizeof h));
  close(fd);
  return h;
}

TEST(LiveNormalise, HeartbeatFromTheOpen) {
  TempDir dir;
  const std::string path = dir.file("4321.0.hlraw");
  FakeShim shim(path, 1, false);
  const auto header = [&] { return header_of(path); };
  {
    LiveRawFile keep(path, false);
    EXPECT_EQ(header().consumer_ns, 0u);
    EXPECT_EQ(header().reader_started, 0u);
  }
  {
    LiveRawFile live(path, true);
    EXPECT_NE(header().consumer_ns, 0u);
    EXPECT_EQ(header().reader_started, 1u);
  }
  EXPECT_EQ(header().consumer_ns, 0u);  // cleared when the reader is done
  EXPECT_EQ(header().reader_started, 1u);
}

// heaplab capture gives up on a live reader for a file (no thread for it,
// or one that will not open): the file is marked as if opened, so that its
// shim stops waiting. Not a file without a valid header yet (the shim
// writes the magic last, after the mark's place), nor one shorter than its
// header block (mapped past its end, a read would be SIGBUS).
TEST(LiveNormalise, GivingUpOnAReaderReleasesTheShim) {
  TempDir dir;
  const std::string path = dir.file("4321.0.hlraw");
  const auto started = [&] { return header_of(path).reader_started; };
  {
    FakeShim shim(path, 1, false);
    EXPECT_EQ(started(), 0u);
    EXPECT_TRUE(release_waiting_shim(path));
    EXPECT_EQ(started(), 1u);
  }
  const std::string blank = dir.file("4322.0.hlraw");
  {
    const int fd = open(blank.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EXPECT_EQ(ftruncate(fd, off_t(raw::kBlockSize)), 0);
    close(fd);
  }
  EXPECT_FALSE(release_waiting_shim(blank));
  EXPECT_EQ(heaplab::trace::testutil::read_file(blank), std::string(raw::kBlockSize, '\0'));
  const std::string short_file = dir.file("4323.0.hlraw");
  { std::ofstream(short_file) << "HLRAWCAP"; }
  EXPECT_FALSE(release_waiting_shim(short_file));
  EXPECT_FALSE(release_waiting_shim(dir.file("missing.hlraw")));
}

TEST(LiveNormalise, ConsumedBlocksAreGivenBack) {
  const std::vector<Step> steps = script(60000);  // about 29 blocks per thread
  TempDir keep_dir, dir;
  LiveRun kept = run_live(keep_dir, steps, 3000, false, false);
  LiveRun live = run_live(dir, steps, 3000, false, true);
  EXPECT_EQ(live.rep.records, steps.size());
  EXPECT_EQ(live.consumed, live.appended) << "every appended block consumed and counted for the shim";
  EXPECT_GT(live.appended, 80u);
  // Holes punched: what stays allocated is far less than the file's length.
  EXPECT_LT(live.blocks_disk_bytes, 8 * raw::kBlockSize) << "of " << live.appended * raw::kBlockSize;
  expect_same(live.events, kept.events);
}

// Full blocks left in the mapping (no copy to .blocks) are read there,
// zeroed and given back, and the threads write them again: the same events
// as normalising a kept capture, every block consumed once, the mapping's
// 64 slots enough for about 88 blocks.
TEST(LiveNormalise, PublishedBlocksAreReadInPlaceAndGivenBack) {
  const std::vector<Step> steps = script(60000);  // about 29 blocks per thread
  TempDir keep_dir, dir;
  LiveRun kept = run_live(keep_dir, steps, 3000, false, false);
  LiveRun live = run_live(dir, steps, 3000, false, true, 1);
  EXPECT_EQ(live.rep.records, steps.size());
  EXPECT_EQ(live.rep.holes, 0u);
  // Every published block consumed once and counted for the shim, but for
  // those read once the process had ended (nobody waits then): a thread's last.
  EXPECT_LE(live.consumed, live.appended);
  EXPECT_LE(live.appended - live.consumed, 3u);
  EXPECT_GT(live.appended, 80u);
  EXPECT_GT(live.taken_back, 20u) << "blocks given back were written again";
  EXPECT_LE(live.slots, raw::kBlocksPerSegment);
  EXPECT_EQ(live.blocks_disk_bytes, 0u) << "nothing copied to .blocks";
  expect_same(live.events, kept.events);
}

// A thread's blocks alternately left in the mapping and appended (as when
// the shim finds no fresh block, or the reader's heartbeat is late): each
// read once, from where it is, and counted once; slow appends too.
TEST(LiveNormalise, PublishedAndAppendedBlocksMixed) {
  const std::vector<Step> steps = script(60000);
  TempDir keep_dir;
  LiveRun kept = run_live(keep_dir, steps, 3000, false, false);
  for (bool slow : {false, true}) {
    SCOPED_TRACE(slow ? "slow appends" : "appends");
    TempDir dir;
    LiveRun live = run_live(dir, steps, 3000, slow, true, 2);
    EXPECT_EQ(live.rep.records, steps.size());
    EXPECT_EQ(live.rep.holes, 0u);
    EXPECT_LE(live.consumed, live.appended);
    EXPECT_LE(live.appended - live.consumed, 3u);
    EXPECT_GT(live.taken_back, 10u);
    expect_same(live.events, kept.events);
  }
}

// `steps` with thread 0 ending after `own` of its records (a hole after its
// `hole_after`th record, if not 0): its later records dropped, its end a
// batch or two after its last record (4,000 of the other threads' later),
// so that the reader has seen its block as it was first (exactly full: read
// in place while current).
std::vector<Step> thread0_ends(const std::vector<Step>& steps, uint64_t own, uint64_t hole_after = 0) {
  std::vector<Step> out;
  size_t cut = 0;
  for (uint64_t n = 0; cut < steps.size() && n < own; ++cut) {
    out.push_back(steps[cut]);
    if (steps[cut].thread == 0 && ++n == hole_after) out.push_back({0, raw::Record{0, kHole, 0, 0}});
  }
  size_t others = 0;
  for (size_t i = cut; i < steps.size(); ++i) {
    if (steps[i].thread == 0) continue;
    out.push_back(steps[i]);
    if (++others == 4000) out.push_back({0, raw::Record{}});
  }
  return out;
}

// Normalises `ended` (thread 0 ends part way, its block then given back to
// the shim and written again by another thread) with a reader that keeps
// the raw files and with one that consumes; checks what both must show:
// records, no holes, one thread gone, the block reused only where consumed,
// and the same events.
struct EndedRuns {
  LiveRun kept, live;
};
EndedRuns run_ended(const TempDir& keep_dir, const TempDir& dir, const std::vector<Step>& ended, uint64_t records) {
  EndedRuns r{run_live(keep_dir, ended, 3000, false, false, 1), run_live(dir, ended, 3000, false, true, 1)};
  EXPECT_EQ(r.live.rep.records, records);
  EXPECT_EQ(r.live.rep.holes, 0u);
  EXPECT_EQ(r.live.threads_gone, 1u);
  EXPECT_TRUE(r.live.ended_block_reused) << "the ended thread's block was given back and written again";
  EXPECT_FALSE(r.kept.ended_block_reused) << "a reader that does not consume gives nothing back";
  expect_same(r.live.events, r.kept.events);
  return r;
}

// A thread that ends part way through a block (its exit word marked, as the
// kernel marks it once the thread has gone): the reader reads the block
// whole at once, gives it back, and another thread writes it again. The
// same events as normalising a kept capture; every block counted for the
// shim consumed, the ended thread's too.
TEST(LiveNormalise, AnEndedThreadsLastBlockIsReadAndGivenBack) {
  const std::vector<Step> steps = script(60000);  // about 29 blocks per thread
  // Thread 0 ends a third of the way through: 700 records into a block, or
  // with its block exactly full (read in place while current, then given
  // back once the thread is gone).
  for (uint64_t into : {uint64_t{700}, uint64_t{0}}) {
    SCOPED_TRACE("records into its last block: " + std::to_string(into));
    const std::vector<Step> ended = thread0_ends(steps, 10 * raw::kRecordsPerBlock + into);
    TempDir keep_dir, dir;
    const LiveRun live = run_ended(keep_dir, dir, ended, ended.size() - 1).live;
    // Every block counted for the shim consumed, but for those read once
    // the process had ended (nobody waits then): the two running threads' last.
    EXPECT_LE(live.consumed, live.appended);
    EXPECT_LE(live.appended - live.consumed, 2u);
    // The ended thread's stream closed as soon as its last block was read:
    // its thread_end comes before the other threads' later calls.
    const std::vector<Event> all = trace::testutil::read_all(*trace::TraceReader::open(dir.file("live.hlt")));
    size_t end0 = all.size(), last1 = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i].op == Op::thread_end && all[i].thread == 0) end0 = std::min(end0, i);
      if (all[i].thread == 1 && all[i].op == Op::malloc) last1 = i;
    }
    EXPECT_LT(end0, last1);
    // Its stream was freed once closed, its tid and name given to the
    // thread table then: all three threads are described.
    auto r = trace::TraceReader::open(dir.file("live.hlt"));
    for (uint32_t t = 0; t < 3; ++t)
      EXPECT_EQ(r->thread_info(t), (trace::ThreadInfo{100 + t, "worker" + std::to_string(t)})) << "thread " << t;
  }
}

// A thread that dies inside the shim, after its last complete record: the
// record it was writing has its other words and no head. Its block is read
// whole and given back (nothing follows the torn record), zeroed only as far
// as its complete records, and other threads write it again: the same
// events as normalising a kept capture, the torn record no event.
TEST(LiveNormalise, AnEndedThreadsBlockWithATornLastRecordIsGivenBack) {
  std::vector<Step> ended = thread0_ends(script(60000), 10 * raw::kRecordsPerBlock + 700);
  size_t last0 = 0;
  for (size_t i = 0; i < ended.size(); ++i)
    if (ended[i].thread == 0 && ended[i].rec.head != 0) last0 = i;
  ended.insert(ended.begin() + std::ptrdiff_t(last0) + 1, Step{0, raw::Record{0, kTorn, 0, 0}});
  TempDir keep_dir, dir;
  run_ended(keep_dir, dir, ended, ended.size() - 2);  // (the torn record is none)
}

// A thread that ends in a block with a hole (a record reserved and never
// written, complete ones after it): the reader reads the block at once, the
// hole counted, and keeps it (a write may yet come, for all it knows) but
// counts it consumed, so that the shim's count stays even.
TEST(LiveNormalise, AnEndedThreadsBlockWithAHoleIsReadAndKept) {
  const std::vector<Step> ended =
      thread0_ends(script(60000), 10 * raw::kRecordsPerBlock + 700, 10 * raw::kRecordsPerBlock + 300);
  TempDir keep_dir, dir;
  LiveRun kept = run_live(keep_dir, ended, 3000, false, false, 1);
  LiveRun live = run_live(dir, ended, 3000, false, true, 1);
  EXPECT_EQ(live.rep.records, ended.size() - 2);  // every record read, none twice
  EXPECT_EQ(live.rep.holes, 1u);
  EXPECT_EQ(kept.rep.holes, 1u);
  EXPECT_EQ(live.threads_gone, 1u);
  EXPECT_FALSE(live.ended_block_reused) << "a block with a hole is never given back";
  // Every block counted for the shim consumed, the kept one too (the running
  // threads' last are current, not counted: nothing of theirs is left over).
  EXPECT_EQ(live.consumed, live.appended);
  // (Not the same events as the kept capture's: with the hole, thread 0's
  // stream waits at it as if caught up, and the fake shim's ticks are far
  // below the clock, so the other threads' records pass it: kept, the rest
  // of its block is read only at the end.)
  EXPECT_EQ(kept.rep.records, ended.size() - 2);
}

TEST(LiveNormalise, ThreadIdleAfterAFullBlockHoldsNothingUp) {
  // Thread 0 fills its block exactly, then makes no more calls: its block
  // stays in the mapping, full, never appended. Its next record can only
  // come after the reader looked: thread 1's blocks are consumed as they come.
  std::vector<Step> steps;
  uint64_t ticks = kStart + 10;
  for (uint64_t i = 0; i < raw::kRecordsPerBlock / 2; ++i) {
    steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::malloc), ticks++), 0x1000 + i * 64, 32, 0}});
    steps.push_back({0, raw::Record{raw::record_head(uint32_t(Op::free), ticks++), 0x1000 + i * 64, 0, 0}});
  }
  for (uint64_t i = 0; i < 60 * raw::kRecordsPerBlock / 2; ++i) {
    steps.push_back({1, raw::Record{raw::record_head(uint32_t(Op::malloc), ticks++), 0x900000 + i * 64, 48, 0}});
    steps.push_back({1, raw::Record{raw::record_head(uint32_t(Op::free), ticks++), 0x900000 + i * 64, 0, 0}});
  }
  TempDir dir;
  LiveRun live = run_live(dir, steps, 2000, false, true);
  EXPECT_EQ(live.rep.records, steps.size());
  EXPECT_EQ(live.rep.unknown_frees, 0u);
  EXPECT_GE(live.appended, 59u);
  EXPECT_EQ(live.consumed, live.appended);
  EXPECT_LE(live.most_unconsumed, 2u) << "blocks waited for thread 0, which had nothing more to write";
}

TEST(LiveNormalise, AnIdleThreadsBufferGoesBack) {
  // Thread 0 writes 100 records and thread 2 two, then nothing while
  // thread 1 writes 10 blocks' worth; thread 2 then writes 100 more and
  // idles again (taking a buffer given back, thread 0's or its own, and
  // filling it with its records); thread 0 writes 100 more in the same
  // block while thread 1 goes on for 10 blocks more. (Thread 2 starts at
  // once: the fake shim numbers a thread's first slot by the thread, and
  // blocks left in the mapping take new slots from the same count.) With no idle limit, a cursor gives its buffer back
  // once it has found nothing new twice, and takes one again (another thread's, as it is) for the records after: they
  // are copied at their place in the block and read as the trace normalised afterwards has them, or as the live run
  // that keeps its raw files has them when blocks are consumed and left in the mapping.
  std::vector<Step> steps;
  uint64_t ticks = kStart + 10;
  auto pairs = [&](uint32_t t, uint64_t n, uint64_t base) {
    for (uint64_t i = 0; i < n; ++i) {
      steps.push_back({t, raw::Record{raw::record_head(uint32_t(Op::malloc), ticks++), base + i * 64, 32, 0}});
      steps.push_back({t, raw::Record{raw::record_head(uint32_t(Op::free), ticks++), base + i * 64, 0, 0}});
    }
  };
  pairs(0, 50, 0x1000);
  pairs(2, 1, 0x30000);
  pairs(1, 10 * raw::kRecordsPerBlock / 2, 0x900000);
  pairs(2, 50, 0x40000);
  pairs(1, 5 * raw::kRecordsPerBlock / 2, 0xa00000);
  pairs(0, 50, 0x80000);
  pairs(1, 10 * raw::kRecordsPerBlock / 2, 0xb00000);
  TempDir dir;
  LiveRun kept = run_live(dir, steps, 2000, false, false, 0, {}, false, std::chrono::nanoseconds(0));
  EXPECT_EQ(kept.rep.records, steps.size());
  EXPECT_EQ(kept.rep.unknown_frees, 0u);
  {
    SCOPED_TRACE("kept against after");
    expect_same(kept.events, normalise_after(dir));
  }
  // The buffers held at each poll: the threads' at first, thread 1's alone
  // while the others idle, two again once another writes again.
  const auto& b = kept.buffers;
  ASSERT_GE(b.size(), 20u);
  EXPECT_GE(std::count(b.begin(), b.end(), 1u), 10);
  const auto first_two = std::find(b.begin(), b.end(), 2u);
  const auto then_one = std::find(first_two, b.end(), 1u);
  EXPECT_NE(std::find(then_one, b.end(), 2u), b.end()) << "no cursor took a buffer again while the program ran";
  EXPECT_LE(*std::max_element(b.begin(), b.end()), 3u);
  for (const int publish : {0, 1}) {
    TempDir dir2;
    LiveRun consumed = run_live(dir2, steps, 2000, false, true, publish, {}, false, std::chrono::nanoseconds(0));
    EXPECT_EQ(consumed.rep.unknown_frees, 0u) << "publish " << publish;
    EXPECT_EQ(consumed.rep.records, steps.size());
    SCOPED_TRACE("consumed against kept, publish " + std::to_string(publish));
    expect_same(consumed.events, kept.events);
  }
}

TEST(LiveNormalise, NotARawFileYet) {
  TempDir dir;
  const std::string path = dir.file("1.0.hlraw");
  trace::testutil::write_file(path, std::string(raw::kBlockSize, '\0'));  // the shim writes the magic last
  try {
    LiveRawFile raw(path, true);
    FAIL() << "opened a file without its magic";
  } catch (const RawError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": not a heaplab raw capture (bad magic)");
  }
}

}  // namespace
}  // namespace heaplab::normalise
