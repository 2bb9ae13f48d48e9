#include "capture/normalise/normalise.h"
#include "common/progress.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <string>
#include <sstream>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>

#include "capture/format/flat_map.h"
#include "capture/format/heap_top.h"
#include "capture/import/metadata.h"
#include "capture/normalise/memory_map.h"
#include "capture/normalise/raw_live.h"
#include "common/files.h"

namespace heaplab::normalise {

using trace::Event;
using trace::Op;
using namespace heaplab::raw;

namespace {

// A non-negative double as uint64_t, UINT64_MAX beyond (a crafted clock
// far from the start: the conversion would be undefined).
// (Below 2^63 first: the signed conversion is one instruction, the
// unsigned one a branch and two on x86-64; this runs twice a record.)
inline uint64_t saturated(double v) {
  if (v > 0 && v < 9223372036854775808.0) [[likely]]
    return uint64_t(int64_t(v));
  return v >= 18446744073709551615.0 ? UINT64_MAX : v > 0 ? uint64_t(v) : 0;
}

struct Obj {  // a live object: its id, its requested bytes
  uint64_t id = 0, bytes = 0;
};

// Address -> live object, 16 bytes an entry (four a cache line, none across
// two): the id and the requested bytes packed in one word, the id in the low
// 40 bits and the bytes in the high 24. An object whose id or bytes do not
// fit (a block of 2^24 - 1 bytes or more, about 16 MiB, or an id of 2^40 or
// more) is marked so (bytes all ones) and kept whole in a table of its
// own. The live set is what the normaliser holds most of: 24-byte entries
// took half as much again. In a SplitFlatMap: from about 800,000 live
// objects on, 16 tables at a load of 3/8 to 3/4, each doubling alone, where
// one table at 1/4 to 1/2 took twice the room and, while it doubled, three
// times (2.5 million live objects of a 512-thread program: 192 MiB at that
// moment, now 64 MiB).
class LiveTable {
 public:
  size_t size() const { return packed_.size(); }
  void prefetch(uint64_t addr) const { packed_.prefetch(addr); }
  // Inserts or overwrites.
  void put(uint64_t addr, const Obj& o) {
    const auto [v, fresh] = packed_.try_insert(addr);
    if (!fresh && big(*v)) big_.erase(addr);
    *v = pack(addr, o);
  }
  // If `addr` is not live: makes it so, with the object `make()` returns
  // (called once the entry is made; it must not change packed_), and
  // returns true. Else false, and nothing changes.
  template <class Make>
  bool insert_new(uint64_t addr, Make&& make) {
    const auto [v, fresh] = packed_.try_insert(addr);
    if (fresh) *v = pack(addr, make());
    return fresh;
  }
  bool erase(uint64_t addr, Obj* out) {
    uint64_t v;
    if (!packed_.erase(addr, &v)) return false;
    if (big(v))
      big_.erase(addr, out);
    else
      *out = unpack(v);
    return true;
  }
  bool find(uint64_t addr, Obj* out) {
    const uint64_t* v = packed_.find(addr);
    if (!v) return false;
    *out = big(*v) ? *big_.find(addr) : unpack(*v);
    return true;
  }

 private:
  static constexpr unsigned kIdBits = 40;
  static constexpr uint64_t kIdMask = (uint64_t{1} << kIdBits) - 1, kBig = (uint64_t{1} << (64 - kIdBits)) - 1;
  static bool big(uint64_t v) { return v >> kIdBits == kBig; }
  static Obj unpack(uint64_t v) { return Obj{v & kIdMask, v >> kIdBits}; }
  uint64_t pack(uint64_t addr, const Obj& o) {
    if (o.id <= kIdMask && o.bytes < kBig) return o.id | o.bytes << kIdBits;
    big_.put(addr, o);
    return kBig << kIdBits;
  }
  SplitFlatMap<uint64_t> packed_;
  FlatMap<Obj> big_;
};

struct Pending {  // a realloc between its two records
  uint64_t old = 0;
  Obj obj;  // the object at `old`
  uint64_t size = 0, count = 0;
  bool known = false;
};

struct Stream {
  explicit Stream(std::unique_ptr<RecordCursor> c) : cursor(std::move(c)) {}
  std::unique_ptr<RecordCursor> cursor;
  const Record* rec = nullptr;
  uint64_t ticks = 0;   // of rec, unwrapped and never decreasing
  uint64_t gen = 0;     // records advanced past: tells stale heap entries
  uint32_t index = 0;   // output thread index
  uint32_t source = 0;  // the source's thread number (RecordSource::cursor)
  bool started = false;
  bool busy = false;    // its record is being processed
  bool closed = false;  // ended: thread_end written (or never started)
  uint64_t holes_reported = 0;
  uint64_t ticks_of_current = 0;  // of the record being processed
  uint64_t overhead = 0;          // the shim's timed cost on this thread so far (kRawOverhead), ticks
  uint64_t records = 0;           // records of this thread processed (each cost the shim's fast path)
  std::vector<Pending> pending;
  struct Remap {
    uint64_t old, old_len, pages;
  };
  std::vector<Remap> remaps;  // mremap begun, not yet returned
};

struct Key {
  uint64_t ticks;
  uint32_t rank;
  uint32_t stream;
  uint64_t gen;
  bool operator>(const Key& o) const { return std::tie(ticks, rank, stream) > std::tie(o.ticks, o.rank, o.stream); }
};

// The streams' next records, earliest first: a binary heap that can also
// swap its top for a new key in one pass (replace_top), which the merge
// does whenever a stream's next record comes after another's.
class KeyHeap {
 public:
  bool empty() const { return v_.empty(); }
  const Key& top() const { return v_.front(); }
  void push(const Key& k) {
    v_.push_back(k);
    std::push_heap(v_.begin(), v_.end(), std::greater<>{});
  }
  void pop() {
    std::pop_heap(v_.begin(), v_.end(), std::greater<>{});
    v_.pop_back();
  }
  // pop() then push(k), in one pass.
  void replace_top(const Key& k) { replace_heap_top(v_, k, std::greater<>{}); }

 private:
  std::vector<Key> v_;
};

// Releases sort before allocations stamped at the same tick.
uint32_t rank(uint32_t op) {
  if (op == kRawReallocBegin || op == kRawReallocarrayBegin) return 0;
  if (op < trace::kOpCount && trace::op_produces(Op(op))) return 1;
  return 0;
}

// Hands events to a second thread that appends them to the writer (which
// encodes and compresses chunks): normalising and writing overlap. Batches
// keep the locking rare; at most kMaxQueued batches wait, bounding memory.
class WriterPipe {
 public:
  explicit WriterPipe(trace::TraceWriter& w) : w_(w), thread_([this] { run(); }) {}
  ~WriterPipe() { finish_nothrow(); }

  void set_thread_info(uint32_t thread, trace::ThreadInfo info) { cur_.infos.emplace_back(thread, std::move(info)); }
  // The level of the chunks the writer compresses once it has appended the
  // events so far (they go in a batch of their own); chunks still open then
  // take the new level too.
  void set_level(int level) {
    if (!cur_.events.empty() || !cur_.infos.empty()) send();
    cur_.level = level;
  }
  void push(const Event& e) {
    cur_.events.push_back(e);
    if (cur_.events.size() == kBatch) send();
  }
  // Waits until everything is written; rethrows the writer's error.
  void finish() {
    finish_nothrow();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static constexpr size_t kBatch = 8192, kMaxQueued = 8;
  struct Batch {
    std::vector<std::pair<uint32_t, trace::ThreadInfo>> infos;
    std::vector<Event> events;
    int level = 0;  // set_level()'s, to apply first; 0: none
  };

  void send() {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [&] { return queue_.size() < kMaxQueued || failed_; });
    if (failed_) {  // the writer thread stopped: stop producing too
      lock.unlock();
      finish();
    }
    queue_.push_back(std::move(cur_));
    // Reuse a written batch's memory: fresh pages cost a fault each (~11 us
    // on gVisor hosts), which made a new batch per 8192 events slower than
    // writing without the second thread.
    if (!free_.empty()) {
      cur_ = std::move(free_.back());
      free_.pop_back();
    } else {
      cur_ = Batch{};
      cur_.events.reserve(kBatch);
    }
    ready_.notify_one();
  }

  void finish_nothrow() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!cur_.events.empty() || !cur_.infos.empty() || cur_.level != 0) queue_.push_back(std::move(cur_));
      done_ = true;
    }
    ready_.notify_one();
    thread_.join();
  }

  void run() {
    for (;;) {
      Batch b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        b = std::move(queue_.front());
        queue_.pop_front();
      }
      space_.notify_one();
      try {
        if (b.level != 0) w_.set_level(b.level);
        for (auto& [t, info] : b.infos) w_.set_thread_info(t, std::move(info));
        for (Event& e : b.events) w_.append(e);
        b.infos.clear();
        b.events.clear();
        b.level = 0;
        std::lock_guard<std::mutex> lock(mu_);
        free_.push_back(std::move(b));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        failed_ = true;
        queue_.clear();
        space_.notify_all();
        return;
      }
    }
  }

  trace::TraceWriter& w_;
  Batch cur_;
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<Batch> queue_;
  std::vector<Batch> free_;  // written batches, for reuse
  bool done_ = false, failed_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the rest is constructed
};

// The directory a file goes in ("." for a bare name).
std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

class Normaliser {
 public:
  Normaliser(RecordSource& in, const std::string& out, const NormaliseOptions& opt)
      : in_(in), opt_(opt), writer_(out, writer_options()), pipe_(writer_), memory_(directory_of(out)) {
    window_ticks_ = ticks_for_ns(10000);  // 10 us; the real skew is well under 1 us
    read_header_fields();
    if (opt_.busy_level != 0) writer_.check_level(opt_.busy_level);  // (not midway, on the writer's thread)
  }

  // Everything, from a source that is complete.
  NormaliseReport run();
  // What is safe to write from a source still being written: the records
  // no thread can still write one before. `now`: the source's clock read
  // before it was last polled. Returns the records processed.
  uint64_t step(uint64_t now);
  // The source is complete: the rest, and the trace closed.
  NormaliseReport finish(const nlohmann::json& capture_metadata);
  // Whether each thread_end is written once its thread was found gone
  // (NormaliseReport::thread_ends_found_gone).
  void set_thread_ends_found_gone(bool found) { rep_.thread_ends_found_gone = found; }
  // Whether the program keeps every core busy (or the reader is behind):
  // chunks are then compressed at opt_.busy_level, if set.
  void set_busy(bool busy) {
    if (opt_.busy_level == 0 || busy == busy_) return;
    busy_ = busy;
    pipe_.set_level(busy ? opt_.busy_level : opt_.level);
  }

 private:
  void add_streams();
  void refill();
  void queue(size_t s);
  void end_stream(Stream& st, uint64_t time);
  uint64_t bound(const Stream& st) const;
  uint64_t drain(bool all, common::Progress* progress = nullptr);
  // Clock ticks in `ns` nanoseconds (3 a ns when the rate is unknown).
  uint64_t ticks_for_ns(double ns) const { return uint64_t(ns / (ns_per_tick_ > 0 ? ns_per_tick_ : 1.0 / 3)); }
  trace::WriterOptions writer_options();
  nlohmann::json metadata();
  void advance(size_t s);
  // queue_next: put the stream's next record in the heap (drain() may
  // process it at once instead).
  void process(size_t s, bool queue_next = true);
  Key key(size_t s) const {
    const Stream& st = *streams_[s];
    return Key{st.ticks, rank(record_op(st.rec->head)), uint32_t(s), st.gen};
  }
  bool resolve(uint64_t addr, bool want_release);
  void handle(Stream& st, const Record& r, uint64_t time);
  void handle_memory(Stream& st, const Record& r, uint64_t time);
  // old_bytes: the requested bytes of the object e consumes (e.old).
  uint64_t append(Event& e, uint64_t old_bytes = 0);
  void produce(Event& e, uint64_t addr, uint64_t old_bytes = 0);
  uint64_t ns(uint64_t ticks) const;
  // The shim's cost on a stream's thread so far: its timed work, and the
  // calibrated cost of every record.
  double shim_cost_ticks(const Stream& st) const { return double(st.overhead) + double(st.records) * event_cost_; }
  uint64_t shim_cost_ns(const Stream& st) const { return saturated(shim_cost_ticks(st) * ns_per_tick_); }
  // The stream's thread in the trace's thread table: its tid and name as
  // the source has them now.
  void describe(const Stream& st) {
    pipe_.set_thread_info(st.index, trace::ThreadInfo{in_.thread_tid(st.source), in_.thread_name(st.source)});
  }
  uint64_t last_raw_ = 0, first_raw_ = 0;  // uncorrected times

  RecordSource& in_;
  NormaliseOptions opt_;
  double ns_per_tick_ = 0;
  // From the source's header (read there once, not per record: a virtual
  // call, on a page the shim writes). The shim stores its event cost once,
  // at start-up: step() reads it again.
  uint64_t start_ticks_ = 0;
  double event_cost_ = 0;  // the fast path's cost, ticks per record
  void read_header_fields() {
    start_ticks_ = in_.header().start_ticks;
    event_cost_ = double(__atomic_load_n(&in_.header().event_cost_x1024, __ATOMIC_RELAXED)) / 1024.0;
  }
  NormaliseReport rep_;  // before writer_: writer_options() fills rep_.clock
  trace::TraceWriter writer_;
  WriterPipe pipe_;
  uint64_t next_id_ = 0;  // ids the writer will assign (dense, in order)
  bool busy_ = false;     // set_busy()
  uint64_t events_ = 0;
  // By the source's thread number; a stream that has ended and been closed
  // is freed (null), so a thread that has gone costs 8 bytes here.
  std::vector<std::unique_ptr<Stream>> streams_;
  // The streams not yet freed, in ascending order: what refill(), step()
  // and resolve() look through, so a poll's work follows the threads not
  // yet ended (and the source's thread numbers no thread has used yet),
  // not every thread the program ever ran.
  std::vector<uint32_t> open_;
  double closed_cost_ticks_ = 0;  // the largest shim cost of a freed stream, ticks (for finish())
  // process(): the largest shim cost of a thread at a record processed, and
  // the correction taken off every record (catching up with it), ticks; the
  // clock at the latest record processed.
  static constexpr double kCatchUp = 0.9;
  double cost_target_ = 0, cost_ticks_ = 0;
  uint64_t cost_at_ = 0;
  LiveTable live_;  // address -> live object
  KeyHeap heap_;
  uint64_t first_time_ = 0, last_time_ = 0;
  bool any_ = false;
  uint64_t written_time_ = 0;
  uint64_t latest_ticks_ = 0;  // the latest stamp of a record processed in stamp order (rep_.late)
  uint32_t resolving_ = 0;     // resolve() is processing a record ahead of its turn
  uint64_t now_ticks_ = 0;     // ticks of the record being processed
  uint64_t window_ticks_ = 0;  // how far ahead resolve() may look
  uint64_t live_now_ = 0;      // step(): the source's clock before its last poll
  uint64_t watermark_ = 0;     // step(): records up to this may be processed
  uint32_t next_thread_ = 0;
  MemoryMap memory_;
  uint64_t heap_live_ = 0;
  uint64_t objects_live_ = 0;
  uint64_t heap_footprint_ = 0;
  std::vector<uint64_t> last_seq_;  // per output thread: the seq of its latest call  // the live objects' smallest
                                    // footprint in a malloc heap
  // A block's smallest footprint: glibc's chunk (an 8-byte header, 16-byte
  // steps, 32 at least); allocators without headers round to size classes
  // about as much. What a trace explains is counted this way.
  static uint64_t footprint(uint64_t n) {
    return n > (uint64_t{1} << 62) ? n : std::max<uint64_t>(32, (n + 8 + 15) & ~uint64_t{15});
  }
  void note_peak() {
    const uint64_t all = heap_footprint_ + memory_.mapped();
    if (all > rep_.explained_peak) {
      rep_.explained_peak = all;
      rep_.explained_heap = heap_footprint_;
    }
    rep_.heap_peak = std::max(rep_.heap_peak, heap_live_);
    rep_.mapped_peak = std::max(rep_.mapped_peak, memory_.mapped());
  }
};

trace::WriterOptions Normaliser::writer_options() {
  ns_per_tick_ = opt_.ns_per_tick > 0 ? opt_.ns_per_tick : in_.ns_per_tick();
  if (ns_per_tick_ == 0) ns_per_tick_ = opt_.fallback_ns_per_tick;
  trace::WriterOptions w;
  w.codec = opt_.codec;
  w.level = opt_.level;
  w.chunk_events = opt_.chunk_events;
  w.timestamps = ns_per_tick_ > 0;
  rep_.clock = !w.timestamps ? "none" : in_.header().clock == kClockTsc ? "tsc" : "monotonic";
  w.metadata_json = metadata().dump();
  return w;
}

nlohmann::json Normaliser::metadata() {
  const FileHeader& h = in_.header();
  nlohmann::json m = import::base_metadata("ldpreload", rep_.clock, in_.command_line());
  nlohmann::json& c = m["capture"];
  c["pid"] = h.pid;
  c["ppid"] = h.ppid;
  c["exec_generation"] = h.exec_generation;
  c["fork_child"] = bool(h.flags & kFlagForkChild);
  c["exe"] = std::string(h.exe, std::min<size_t>(h.exe_len, sizeof h.exe));
  c["start_realtime_ns"] = h.start_real_ns;
  if (h.clock == kClockTsc) c["tsc_ns_per_tick"] = ns_per_tick_;
  c.update(opt_.capture_metadata);
  return m;
}

// Writes a successful producing call whose result is `addr`.
void Normaliser::produce(Event& e, uint64_t addr, uint64_t old_bytes) {
  // (append() leaves live_ alone.)
  if (live_.insert_new(addr, [&] { return Obj{append(e, old_bytes), e.requested_bytes()}; })) return;
  if (!resolve(addr, true)) ++rep_.reused_live;  // the old object leaks (its bytes stay counted)
  const uint64_t id = append(e, old_bytes);
  live_.put(addr, Obj{id, e.requested_bytes()});
}

uint64_t Normaliser::append(Event& e, uint64_t old_bytes) {
  e.time = std::max(e.time, written_time_);  // a record processed early by resolve()
  written_time_ = e.time;
  // The writer numbers produced objects 1, 2, 3 ... in append order; the
  // pipe keeps that order, so the id is known here.
  bool produces = trace::op_produces(e.op) && !(e.flags & trace::kNullResult);
  e.id = produces ? ++next_id_ : 0;
  ++events_;
  if (e.thread >= last_seq_.size()) last_seq_.resize(e.thread + 1, UINT64_MAX);
  // A latency record names this call; after a lost stretch, none.
  last_seq_[e.thread] = unsigned(e.op) < unsigned(Op::thread_start) ? events_ - 1 : UINT64_MAX;
  // The live requested bytes, for the share of the program's memory the
  // trace explains.
  if (e.old != 0 && trace::op_consumes(e.op) && !(e.flags & trace::kFailed)) {
    --objects_live_;
    heap_live_ -= old_bytes;
    heap_footprint_ -= footprint(old_bytes);
  }
  if (produces) {
    const uint64_t bytes = e.requested_bytes();
    heap_live_ += bytes;
    heap_footprint_ += footprint(bytes);
    rep_.objects_peak = std::max(rep_.objects_peak, ++objects_live_);
    note_peak();
  }
  pipe_.push(e);
  return e.id;
}

void Normaliser::advance(size_t s) {
  Stream& st = *streams_[s];
  st.rec = st.cursor->next();
  if (!st.rec) return;
  live_.prefetch(st.rec->a);  // looked up when processed, after other streams' records
  // 56-bit ticks, unwrapped around the start: up to 2^55 ticks before it (a
  // thread's unfenced TSC read just before capture started) or after.
  uint64_t base = start_ticks_ - (uint64_t{1} << 55);
  uint64_t t = base + ((record_ticks(st.rec->head) - base) & kTicksMask);
  if (t < st.ticks) t = st.ticks;  // a signal handler's record stamped out of slot order
  st.ticks = t;
  ++st.gen;
}

void Normaliser::handle(Stream& st, const Record& r, uint64_t time) {
  uint32_t op = record_op(r.head);
  Event e;
  e.time = time;
  e.thread = st.index;
  if (op == kRawReallocBegin || op == kRawReallocarrayBegin) {
    Pending p{r.a, Obj{}, r.b, r.c, false};
    if (r.a) p.known = live_.erase(r.a, &p.obj) || (resolve(r.a, false) && live_.erase(r.a, &p.obj));
    st.pending.push_back(p);
    return;
  }
  if (op == kRawLost) {
    if (r.a == 0) return;
    e.op = Op::lost;
    e.count = r.a;
    append(e);
    rep_.holes += r.a;
    return;
  }
  if (op != kRawLatency && op != kRawOverhead && st.index < last_seq_.size())
    last_seq_[st.index] = UINT64_MAX;  // a latency record names the call right before it, or none
  if (raw_memory_op(op)) {
    handle_memory(st, r, time);
    return;
  }
  if (op == kRawOverhead) return;  // taken into the stream's timeline by process()
  if (op == kRawLatency) {         // the duration of this thread's previous call
    if (st.started && st.index < last_seq_.size() && last_seq_[st.index] != UINT64_MAX) {
      const uint64_t over = in_.header().timer_overhead;
      const double ticks = double(r.a > over ? r.a - over : 0);
      memory_.latency(last_seq_[st.index], st.index,
                      ns_per_tick_ > 0 ? saturated(ticks * ns_per_tick_) : saturated(ticks));
    }
    return;
  }
  if (op > uint32_t(Op::op_delete_array_aligned_nothrow)) {
    ++rep_.bad_records;
    return;
  }
  e.op = Op(op);
  ++rep_.calls;
  if (e.op == Op::realloc || e.op == Op::reallocarray) {
    Pending p;
    if (!st.pending.empty() && st.pending.back().old == r.b) {
      p = st.pending.back();
      st.pending.pop_back();
    } else {  // its first record was lost (a hole)
      p.old = r.b;
      p.size = e.op == Op::realloc ? r.c : 0;
      if (r.b) p.known = live_.erase(r.b, &p.obj);
    }
    e.size = e.op == Op::realloc ? r.c : p.size;
    e.count = e.op == Op::reallocarray ? r.c : 0;
    if (p.old && !p.known) ++rep_.unknown_reallocs;
    e.old = p.known ? p.obj.id : 0;
    if (r.a == 0) {
      bool zero = e.op == Op::realloc ? e.size == 0 : e.size == 0 || e.count == 0;
      if (p.known && zero) {
        e.flags = trace::kNullResult;  // glibc: realloc(p, 0) frees p
      } else {
        e.flags = trace::kNullResult | trace::kFailed;
        if (p.known) live_.put(p.old, p.obj);  // a failed realloc keeps its object
      }
      append(e, p.obj.bytes);
      return;
    }
    produce(e, r.a, p.obj.bytes);
    return;
  }
  if (trace::op_produces(e.op)) {
    e.size = r.b;
    if (trace::op_has(e.op, trace::kAlign)) e.align = r.c;
    if (trace::op_has(e.op, trace::kCount)) e.count = r.c;
    if (r.a == 0) {
      e.flags = trace::kNullResult | trace::kFailed;
      append(e);
      return;
    }
    produce(e, r.a);
    return;
  }
  if (trace::op_has(e.op, trace::kSize)) e.size = r.b;
  if (trace::op_has(e.op, trace::kAlign)) e.align = r.c;
  Obj o;
  if (r.a && !live_.erase(r.a, &o) && !(resolve(r.a, false) && live_.erase(r.a, &o))) {
    ++rep_.unknown_frees;  // allocated before capture started
    --rep_.calls;
    return;
  }
  e.old = o.id;
  append(e, o.bytes);
}

// The program's own memory (raw_format.h, kRawMmap ...).
void Normaliser::handle_memory(Stream& st, const Record& r, uint64_t time) {
  const MemoryPosition at{events_, st.index, time};
  switch (record_op(r.head)) {
    case kRawMmap:  // MAP_FIXED replaces what was there: its resident pages were measured before
      memory_.map(at, r.a, r.b, uint32_t(r.c) & 0x10 /* MAP_FIXED */, r.c >> 32);
      break;
    case kRawMunmap:
      memory_.unmap(at, r.a, r.b, r.c);
      break;
    case kRawMremapBegin:
      st.remaps.push_back(Stream::Remap{r.a, r.b, r.c});
      break;
    case kRawMremap: {  // c = old address | mremap's flags (the address is page-aligned)
      const uint64_t old = r.c & ~uint64_t{0xfff};
      uint64_t pages = trace::kUnknownPages, old_len = 0;
      if (!st.remaps.empty() && (st.remaps.back().old == old || r.a == 0)) {  // (a failed one's is popped too)
        pages = st.remaps.back().pages;
        old_len = st.remaps.back().old_len;
        st.remaps.pop_back();
      }
      if (r.a != 0 && old_len != 0) memory_.remap(at, old, old_len, pages, r.a, r.b, unsigned(r.c & 0xfff));
      break;
    }
    case kRawMadvise:
      memory_.advise(at, r.a, r.b, (r.c & 0xff) == 8 /* MADV_FREE */, r.c >> 8);
      break;
    case kRawBreak:
      memory_.brk(at, r.a, r.b, r.c);
      break;
    case kRawResident: {
      Obj o;
      if (live_.find(r.a, &o))
        memory_.object(o.id, r.c, r.b);
      else
        memory_.resident(r.a, r.c, r.b);
      break;
    }
    default:
      break;
  }
  note_peak();
}

// Processes stream s's current record: writes its events, advances the
// stream and queues its next record.
void Normaliser::process(size_t s, bool queue_next) {
  Stream& st = *streams_[s];
  st.busy = true;
  // The native timeline: the shim's cost on this thread so far (timed work,
  // and the calibrated cost of every record before this one) taken off.
  // (A kRawOverhead record is stamped after the work it reports: its own
  // cost counts. It and kRawLatency make no event: they do not move time.)
  const uint32_t rop = record_op(st.rec->head);
  const bool quiet = rop == kRawOverhead || rop == kRawLatency;
  if (rop == kRawOverhead) st.overhead = std::max(st.overhead, st.rec->a);
  // One correction for every thread: the largest shim cost of any thread
  // so far, so that the times keep the order the clock gave the records.
  // Each thread's own cost put the threads on timelines that drifted apart
  // (a busy thread's cost grows, an idle one's hardly), and the clamp below
  // then held the busier thread's times still whenever the other wrote: a
  // server's main thread sat at one time for 98% of its calls. The busiest
  // thread's cost is what the program's critical path paid where its other
  // threads wait on it (a server's I/O thread on its main thread); threads
  // that never wait on it are moved on too little by as much (the model's
  // limit: which thread waits on which is not recorded). Its cost is at most
  // the clock's time since the start (a damaged kRawOverhead could say
  // more), and the correction catches up with it by at most 9/10 of the
  // clock's advance: a thread's timed stall (a wait for the reader), learnt
  // at its end, is spread over the records after it, which would otherwise
  // all sit at one time until the clock had passed it. (cost_at_ starts at
  // 0: the cost the first record processed reports, such as a wait before
  // the reader opened, is taken whole.)
  const double since_start = double(st.ticks - std::min(st.ticks, start_ticks_));
  cost_target_ = std::max(cost_target_, std::min(shim_cost_ticks(st), since_start));
  if (cost_ticks_ < cost_target_) {
    const double room = double(st.ticks - std::min(st.ticks, cost_at_)) * kCatchUp;
    cost_ticks_ = std::min(cost_target_, cost_ticks_ + room);
  }
  cost_at_ = std::max(cost_at_, st.ticks);
  const uint64_t cost = saturated(cost_ticks_ * ns_per_tick_);
  uint64_t raw = ns(st.ticks);
  uint64_t time = std::max(raw - std::min(raw, cost), last_time_);  // rounding never reorders
  if (!quiet) {
    // Late: stamped before the latest record taken in stamp order, beyond
    // the skew window. (Records resolve() takes ahead, within the window of
    // the record being processed, perhaps again from there, are neither.)
    if (resolving_ == 0) {
      if (st.ticks < latest_ticks_ && latest_ticks_ - st.ticks > window_ticks_) ++rep_.late;
      latest_ticks_ = std::max(latest_ticks_, st.ticks);
    }
    if (raw > last_raw_) last_raw_ = raw;
    if (!any_) first_time_ = time, first_raw_ = raw;
    any_ = true;
    last_time_ = time;
  }
  if (!st.started) {
    st.started = true;
    st.index = next_thread_++;
    describe(st);
    Event e;
    e.op = Op::thread_start;
    e.time = time;
    e.thread = st.index;
    append(e);
  }
  // Holes before this record (found when the stream advanced to it).
  if (uint64_t lost = st.cursor->holes() - st.holes_reported) {
    st.holes_reported = st.cursor->holes();
    Event e;
    e.op = Op::lost;
    e.count = lost;
    e.time = time;
    e.thread = st.index;
    append(e);
    rep_.holes += lost;
  }
  const Record rec = *st.rec;
  st.ticks_of_current = st.ticks;
  ++rep_.records;
  ++st.records;
  advance(s);  // holes it finds lie before the next record: reported with it
  uint64_t saved_now = now_ticks_;
  now_ticks_ = st.ticks_of_current;
  handle(st, rec, time);
  now_ticks_ = saved_now;
  if (st.rec) {
    if (queue_next) queue(s);
  } else if (st.cursor->ended())
    end_stream(st, time);
  else  // waiting for the thread's next record: nothing may pass it
    watermark_ = std::min(watermark_, bound(st));
  st.busy = false;
}

void Normaliser::end_stream(Stream& st, uint64_t time) {
  st.closed = true;
  // What the stream held goes back now, and the stream itself at the end
  // of this refill() or the next (a program that starts threads over and
  // over keeps a pointer for each that has gone): what finish() needs of it
  // is taken here, its thread's name and tid as they are at its end, and
  // its shim cost in ticks (event_cost_ is the shim's calibration, stored
  // once at its start).
  closed_cost_ticks_ = std::max(closed_cost_ticks_, shim_cost_ticks(st));
  if (st.started) describe(st);
  struct Release {
    Stream& st;
    ~Release() {
      st.cursor.reset();
      std::vector<Pending>().swap(st.pending);
      std::vector<Stream::Remap>().swap(st.remaps);
    }
  } release{st};
  if (!st.started) return;
  rep_.unfinished_reallocs += st.pending.size();
  rep_.blocks_missing += st.cursor->changed();
  for (const Pending& p : st.pending)
    if (p.known) live_.put(p.old, p.obj);
  st.pending.clear();
  Event e;
  e.op = Op::thread_end;
  e.time = time;
  e.thread = st.index;
  append(e);
}

// How far records may be processed while this stream waits: the earliest its
// next record can be stamped, less the skew window. That is not before its
// last one; and, if it had written nothing more when the source was polled,
// not before then (a record is stamped just before it is written: a thread
// preempted in between gets its stamp moved up, never its order with
// another's).
uint64_t Normaliser::bound(const Stream& st) const {
  uint64_t b = st.ticks;
  if (st.cursor->caught_up()) {
    const uint64_t margin = ticks_for_ns(20e6);
    b = std::max(b, live_now_ - std::min(live_now_, margin));
  }
  return b - std::min(b, window_ticks_);
}

void Normaliser::queue(size_t s) { heap_.push(key(s)); }

void Normaliser::add_streams() {
  while (streams_.size() < in_.thread_count()) {
    const size_t s = streams_.size();
    streams_.push_back(std::make_unique<Stream>(in_.cursor(s)));
    streams_.back()->source = uint32_t(s);
    open_.push_back(uint32_t(s));
  }
}

// Streams without a record look again; ended ones are closed. Then the
// streams closed since the last refill are freed (none is being processed:
// drain() holds a stream only while it runs). Two passes, so that an error
// thrown by the first leaves open_ naming only streams that exist.
void Normaliser::refill() {
  for (const uint32_t s : open_) {
    Stream& st = *streams_[s];
    if (st.rec || st.closed) continue;
    advance(s);
    if (st.rec)
      queue(s);
    else if (st.cursor->ended())
      end_stream(st, last_time_);
  }
  std::erase_if(open_, [&](uint32_t s) {
    if (!streams_[s]->closed) return false;
    streams_[s].reset();
    return true;
  });
}

// Processes records in time order: all of them, or up to watermark_.
uint64_t Normaliser::drain(bool all, common::Progress* progress) {
  uint64_t done = 0;
  Key k{};
  bool taken = false;  // k was taken off the heap already (swapped for a later key)
  for (;;) {
    if (!taken) {
      if (heap_.empty()) break;
      k = heap_.top();
      if (!all && k.ticks > watermark_) break;
      heap_.pop();
    }
    taken = false;
    if (progress) progress->update(rep_.records);
    Stream* const sp = streams_[k.stream].get();
    if (!sp || k.gen != sp->gen || !sp->rec) continue;  // processed early by resolve() (perhaps freed since)
    Stream& st = *sp;
    process(k.stream, false);
    ++done;
    // The stream's next records while they come before every other
    // stream's: processed without going through the heap (the same order).
    // Else the earliest other goes next, and this stream's key takes its
    // place in the heap (a push and a pop in one pass: the top stays the
    // earliest either way).
    while (st.rec) {
      const Key next = key(k.stream);
      if (!all && next.ticks > watermark_) {
        heap_.push(next);
        break;
      }
      if (!heap_.empty() && next > heap_.top()) {
        const Key first = heap_.top();
        if (!all && first.ticks > watermark_) {
          heap_.push(next);
          break;
        }
        heap_.replace_top(next);
        k = first;
        taken = true;
        break;
      }
      if (progress) progress->update(rep_.records);
      process(k.stream, false);
      ++done;
    }
  }
  return done;
}

uint64_t Normaliser::step(uint64_t now) {
  live_now_ = now;
  read_header_fields();
  // The TSC's rate, measured over ever longer: a clock pair's error shrinks
  // in proportion (timestamps never go back: process() holds them).
  if (opt_.ns_per_tick == 0)
    if (const double r = in_.ns_per_tick(); r > 0) ns_per_tick_ = r;
  add_streams();
  refill();
  // Nothing past the clock read before the poll: a thread the poll did not
  // number yet stamps its first record after that (the shim stamps a record
  // once it has its place), and would otherwise find other threads' records
  // written past it by those that ran dry stamped after the clock read.
  // (The reader's clock is the threads': the TSC, which the shim uses where
  // it is invariant unless told to anyway, or CLOCK_MONOTONIC. A skew
  // between CPUs beyond the window would hold the writing back by as much.)
  watermark_ = now - std::min(now, window_ticks_);
  for (const uint32_t s : open_)
    if (const Stream& st = *streams_[s]; !st.rec && !st.closed) watermark_ = std::min(watermark_, bound(st));
  return drain(false);
}

// The TSC is read without fences (sink.h), so a record can be stamped a few
// cycles out of causal order with another thread's. When an allocation
// returns a still-live address (or a release names an unknown one), the
// record that resolves it is at the head of another thread's stream:
// process that first. Returns true if one was found.
bool Normaliser::resolve(uint64_t addr, bool want_release) {
  for (const uint32_t s : open_) {
    Stream& o = *streams_[s];
    if (o.busy || !o.rec || o.rec->a != addr) continue;
    // Unfenced TSC reads are out of order by at most a few hundred cycles;
    // anything further apart is a genuine event (e.g. reuse of an address
    // freed before capture started), not an inversion.
    if (o.ticks > now_ticks_ + window_ticks_) continue;
    uint32_t op = record_op(o.rec->head);
    bool release = op == kRawReallocBegin || op == kRawReallocarrayBegin ||
                   (op < trace::kOpCount && trace::op_consumes(Op(op)) && !trace::op_produces(Op(op)));
    bool produce = op < trace::kOpCount && trace::op_produces(Op(op));
    if (want_release ? release : produce) {
      ++rep_.reordered;
      ++resolving_;
      process(s);  // (an exception ends the normalising)
      --resolving_;
      return true;
    }
  }
  return false;
}

uint64_t Normaliser::ns(uint64_t ticks) const {
  const uint64_t start = start_ticks_;  // (read_header_fields: not a virtual call a record)
  if (ns_per_tick_ == 0) return 0;
  return ticks > start ? saturated(double(ticks - start) * ns_per_tick_) : 0;
}

NormaliseReport Normaliser::run() {
  add_streams();
  refill();
  // (An estimate: blocks are full but for each thread's last.)
  common::Progress progress("normalising", in_.blocks() * raw::kRecordsPerBlock, "records");
  drain(true, &progress);
  return finish(opt_.capture_metadata);
}

NormaliseReport Normaliser::finish(const nlohmann::json& capture_metadata) {
  opt_.capture_metadata = capture_metadata;
  read_header_fields();
  add_streams();
  refill();
  drain(true);
  refill();  // streams whose last record was processed before they ended
  for (const uint32_t s : open_)
    if (streams_[s]->started) describe(*streams_[s]);
  // Calls the shim counted instead of recording, once capture stopped on an
  // error: which threads made them is not known, so a thread of their own
  // (named "(lost)") holds one `lost` event with their count, at the end.
  rep_.stop_error = in_.header().stop_error;
  if (const uint64_t dropped = __atomic_load_n(&in_.header().dropped_calls, __ATOMIC_ACQUIRE)) {
    const uint32_t index = next_thread_++;
    pipe_.set_thread_info(index, trace::ThreadInfo{0, "(lost)"});
    Event e;
    e.time = last_time_;
    e.thread = index;
    e.op = Op::thread_start;
    append(e);
    e.op = Op::lost;
    e.count = dropped;
    append(e);
    e.op = Op::thread_end;
    e.count = 0;
    append(e);
    rep_.holes += dropped;
    rep_.dropped_calls = dropped;
  }
  pipe_.finish();
  if (writer_.objects() != next_id_ || writer_.events() != events_)
    throw trace::TraceError("normaliser: object ids out of step with the writer");
  rep_.threads = next_thread_;
  rep_.objects = writer_.objects();
  rep_.live_at_end = live_.size();
  rep_.blocks_missing += in_.blocks_missing();
  rep_.clean_exit = in_.clean_exit();
  rep_.duration_ns = any_ ? last_time_ - first_time_ : 0;
  rep_.captured_duration_ns = any_ ? last_raw_ - std::min(last_raw_, first_raw_) : 0;
  double cost_ticks = closed_cost_ticks_;
  for (const uint32_t s : open_) cost_ticks = std::max(cost_ticks, shim_cost_ticks(*streams_[s]));
  // (At most the time from the start to the last record, as process() takes
  // it: a damaged kRawOverhead could say more.)
  rep_.shim_cost_ns = std::min(saturated(cost_ticks * ns_per_tick_), last_raw_);
  rep_.event_cost_ns = double(in_.header().event_cost_x1024) / 1024.0 * ns_per_tick_;
  if (opt_.capture_metadata.contains("wall_ns")) {
    const uint64_t wall = opt_.capture_metadata["wall_ns"].get<uint64_t>();
    rep_.corrected_wall_ns = wall - std::min(wall, rep_.shim_cost_ns);
  }
  rep_.events = writer_.events();
  if (opt_.busy_level != 0 && opt_.busy_level != opt_.level)
    rep_.busy_level_events = writer_.events_at_level(opt_.busy_level);
  rep_.memory_calls = memory_.counts().calls;
  rep_.regions = memory_.counts().regions;
  rep_.unknown_memory_releases = memory_.counts().unknown_releases;
  rep_.resident_counts = memory_.counts().measured;
  rep_.latency_samples = memory_.counts().latencies;
  rep_.latency_samples_dropped = memory_.counts().latencies_dropped;
  rep_.memory_scratch_peak = memory_.scratch_peak_bytes();  // (every record is pushed: the merge writes none)
  if (opt_.capture_metadata.contains("anon_rss_peak_kib")) {
    const uint64_t kib = opt_.capture_metadata["anon_rss_peak_kib"].get<uint64_t>();
    if (kib > 0) rep_.coverage = double(rep_.explained_peak) / (double(kib) * 1024.0);
  }
  writer_.set_memory_source(memory_.records(), [this](trace::MemoryEvent& e) { return memory_.next(e); });
  nlohmann::json m = metadata();
  m["capture"].update(report_to_json(rep_));
  writer_.set_final_metadata(m.dump());
  writer_.close();
  rep_.bytes = writer_.bytes_written();
  return rep_;
}

}  // namespace

NormaliseReport normalise(RecordSource& in, const std::string& out_path, const NormaliseOptions& opt) {
  Normaliser n(in, out_path, opt);
  return n.run();
}

namespace {

// The live reader yields the CPU to the program while the program leaves a
// core free: the program then runs as if alone (on the quiet 2-core VM
// `churn 1 4000000` went from 1.38x to 1.31x native; with two fuzzers at
// nice 19 beside it, from 1.60x to 1.32x: a reader at the program's
// priority took the program's core now and then). Where the program keeps
// every core busy, or the reader falls 3/4 of the shim's limit behind, it
// takes its full share:
// yielding there only made the shim hold the program back while the reader
// got less of the CPU (`churn 2 2000000`: 1.78 s against 1.60 s). Every
// 100 ms it reads the captured process's CPU time (/proc/PID/stat): it
// yields while the process used less than (cores - 0.9) CPUs. (Each
// reader sees its own process only: in a --follow capture of several busy
// processes, each using less, they all yield. The machine's busy time was
// tried instead, and with it, and yielded less often on the quiet machine:
// it counts the system's own chores.) Yielding is nice + 5 (at most 19) from the nice heaplab
// started with, and only where a throwaway thread could go there and back
// (root without CAP_SYS_NICE, or ulimit -e below 20, cannot come back):
// elsewhere it stays as it started. Nice is per thread on Linux; the
// writer's thread keeps its own. busy() tells the normaliser when to
// compress faster (NormaliseOptions::busy_level): while the program keeps
// every core busy, or the reader is behind (measured whether or not the
// reader can yield).
class ReaderPriority {
 public:
  explicit ReaderPriority(uint32_t pid) : stat_("/proc/" + std::to_string(pid) + "/stat") {
    cpu_set_t set;
    cores_ = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : int(sysconf(_SC_NPROCESSORS_ONLN));
    errno = 0;
    const int base = getpriority(PRIO_PROCESS, 0);
    if (base == -1 && errno != 0) return;
    base_ = nice_ = base;
    yield_ = std::min(19, base + 5);
    if (yield_ == base_ || cores_ < 2) return;  // (no lower priority, or no core to leave free)
    bool there_and_back = false;
    std::thread probe([&] {
      const id_t me = id_t(syscall(SYS_gettid));
      there_and_back = setpriority(PRIO_PROCESS, me, yield_) == 0 && setpriority(PRIO_PROCESS, me, base_) == 0;
    });
    probe.join();
    able_ = there_and_back;
    tid_ = id_t(syscall(SYS_gettid));
  }
  ~ReaderPriority() { restore(); }
  ReaderPriority(const ReaderPriority&) = delete;
  ReaderPriority& operator=(const ReaderPriority&) = delete;
  // The program has ended: no one to yield to.
  void restore() { set(base_); }
  // After each poll: the appended blocks it has not consumed yet, and how
  // many may wait before the shim holds the program back.
  void update(uint64_t unconsumed, uint64_t ahead) {
    const auto now = std::chrono::steady_clock::now();
    behind_ = unconsumed >= ahead * 3 / 4;
    if (behind_) {
      set(base_);
      start_window(now);
      return;
    }
    if (now - last_ < std::chrono::milliseconds(100)) return;
    const double program = process_busy(stat_);
    if (program >= 0 && last_program_ >= 0) {
      const double used = (program - last_program_) / std::chrono::duration<double>(now - last_).count();
      cores_busy_ = used >= cores_ - 0.9;
      set(cores_busy_ ? base_ : yield_);  // a core free: yield
    }
    last_ = now;
    last_program_ = program;
  }
  // The program keeps every core busy, or the reader is behind.
  bool busy() const { return behind_ || cores_busy_; }

 private:
  // (A window that began while it was behind would count the time the shim
  // held the program back as a free core.)
  void start_window(std::chrono::steady_clock::time_point now) {
    last_ = now;
    last_program_ = process_busy(stat_);
  }
  // Seconds of CPU a process used (all its threads, from its stat file);
  // -1 if unknown. (read(2), not a stream: a stat file whose process has
  // just exited opens and then fails to read with ESRCH, which libstdc++'s
  // filebuf throws as "basic_filebuf::underflow error reading the file".)
  static double process_busy(const std::string& stat) {
    char buf[1024];
    const int fd = ::open(stat.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    if (n <= 0) return -1;
    const std::string text(buf, size_t(n));
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos || paren + 2 > text.size()) return -1;
    std::istringstream f(text.substr(paren + 2));  // from field 3 (state) on
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && f >> field; ++i) {  // fields 14 and 15: utime, stime
      if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
      if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
    }
    return f ? ticks_to_seconds(utime + stime) : -1;
  }
  static double ticks_to_seconds(unsigned long long ticks) {
    const long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? double(ticks) / double(hz) : -1;
  }
  void set(int nice) {
    if (nice == nice_ || !able_) return;
    if (setpriority(PRIO_PROCESS, tid_, nice) == 0) nice_ = nice;
  }
  std::string stat_;  // the captured process's
  bool able_ = false;
  id_t tid_ = 0;
  int cores_ = 1;
  int base_ = 0, yield_ = 0, nice_ = 0;
  bool behind_ = false, cores_busy_ = false;
  std::chrono::steady_clock::time_point last_{};
  double last_program_ = -1;
};

}  // namespace

NormaliseReport normalise_live(LiveRawFile& in, const std::string& out_path, const NormaliseOptions& opt,
                               const std::function<bool()>& ended,
                               const std::function<nlohmann::json()>& final_metadata) {
  Normaliser n(in, out_path, opt);
  n.set_thread_ends_found_gone(in.consuming());
  ReaderPriority priority(in.header().pid);  // (after the writer's thread started: it keeps its nice)
  while (!ended()) {
    const uint64_t now = in.poll();
    const uint64_t unconsumed = in.unconsumed(), ahead = in.ahead_limit();
    priority.update(unconsumed, ahead);
    n.set_busy(opt.busy ? opt.busy() : priority.busy());
    // Few records: let more gather (each poll reads every thread's block header).
    if ((opt.consume_late && unconsumed < ahead) || n.step(now) < 4096) {
      timespec ts{0, 1000000};
      nanosleep(&ts, nullptr);
    }
  }
  priority.restore();
  n.set_busy(false);  // nothing left to compete with
  in.finish();
  return n.finish(final_metadata());
}

nlohmann::json report_to_json(const NormaliseReport& r) {
  nlohmann::json j = {{"records", r.records},
                      {"events", r.events},
                      {"calls", r.calls},
                      {"threads", r.threads},
                      {"objects", r.objects},
                      {"live_at_end", r.live_at_end},
                      {"unknown_frees", r.unknown_frees},
                      {"unknown_reallocs", r.unknown_reallocs},
                      {"reused_live_addresses", r.reused_live},
                      {"lost_records", r.holes},
                      {"unfinished_reallocs", r.unfinished_reallocs},
                      {"bad_records", r.bad_records},
                      {"reordered_records", r.reordered},
                      {"late_records", r.late},
                      {"blocks_missing", r.blocks_missing},
                      {"busy_level_events", r.busy_level_events},
                      {"duration_ns", r.duration_ns},
                      {"captured_duration_ns", r.captured_duration_ns},
                      {"shim_cost_ns", r.shim_cost_ns},
                      {"event_cost_ns", r.event_cost_ns},
                      {"memory_calls", r.memory_calls},
                      {"regions", r.regions},
                      {"unknown_memory_releases", r.unknown_memory_releases},
                      {"resident_counts", r.resident_counts},
                      {"latency_samples", r.latency_samples},
                      {"latency_samples_dropped", r.latency_samples_dropped},
                      {"heap_live_peak_bytes", r.heap_peak},
                      {"live_objects_peak", r.objects_peak},
                      {"mapped_peak_bytes", r.mapped_peak},
                      {"explained_peak_bytes", r.explained_peak},
                      {"clean_exit", r.clean_exit},
                      {"thread_ends", r.thread_ends_found_gone ? "found_gone" : "last_record"},
                      // Every thread's times take one correction, the largest
                      // shim cost any thread has paid (Normaliser::process).
                      {"time_correction", "largest_thread_cost"},
                      {"dropped_calls", r.dropped_calls}};
  if (r.stop_error) j["stop_error"] = r.stop_error > 0 ? std::strerror(int(r.stop_error)) : "stopped";
  if (r.coverage >= 0) j["coverage"] = r.coverage;
  if (r.corrected_wall_ns) j["corrected_wall_ns"] = r.corrected_wall_ns;
  if (r.memory_scratch_peak) j["memory_scratch_peak_bytes"] = r.memory_scratch_peak;
  return j;
}

NormaliseReport normalise_file(const std::string& raw_path, const std::string& output, const NormaliseOptions& opt) {
  RawFile raw(raw_path);
  NormaliseReport rep;
  common::write_then_rename(output, [&](const std::string& tmp) { rep = normalise(raw, tmp, opt); });
  return rep;
}

}  // namespace heaplab::normalise
