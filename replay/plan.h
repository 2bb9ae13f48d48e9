// A replay plan: a trace's calls pre-decoded into fixed-size steps, one array
// per replay thread, checked so that the replay can never wait forever.
//
// The plan is built by the `heaplab` process (which does not run the
// allocator under test) into a memfd, and mapped read-only by the replayer
// process, so decoding neither costs replay time nor leaves decoder memory in
// the measured heap. See replay/README.md for the whole picture.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "capture/format/event.h"
#include "capture/format/trace_reader.h"

namespace heaplab::replay {

// One call to replay, as the builder makes it and tests read it back
// (testutil::dense_steps); the plan's file holds it packed (PlanStep, below).
//   head = op | flags << 8 | ref << 16  (op: trace::Op 0..29; flags: trace
//                                        EventFlag; ref: object produced, 0 none)
//   old  = ref of the object consumed (0 = NULL pointer)
// A ref names a slot of the replay's object table and the slot's generation
// while the object lives: ref = slot | generation << 32 (see make_ref). The
// builder gives a slot back once its object is consumed, and the next object
// that takes it has the next generation, so the table follows the live
// objects, not every object the trace ever made. A consumer waits until its
// slot holds the generation it names (replay/engine.h).
// Every object, region and kept failed-realloc object gets a replay id as
// well (dense, in order of creation: PlanSummary::max_id counts them); the
// plan only keeps their refs.
//   size = requested size (element size for calloc and reallocarray; the
//          size argument of sized deletes)
//   arg  = element count (calloc, reallocarray) or alignment (aligned calls)
struct Step {
  uint64_t head;
  uint64_t old;
  uint64_t size;
  uint64_t arg;

  trace::Op op() const { return static_cast<trace::Op>(head & 0xff); }
  uint8_t flags() const { return static_cast<uint8_t>(head >> 8); }
  uint64_t id() const { return head >> 16; }  // the ref produced
};
static_assert(sizeof(Step) == 32);

// Refs: slot (< 2^32) | generation (1..kMaxGeneration) << 32, 48 bits. A
// slot whose generation reaches kMaxGeneration is retired, never reused, so
// a waiting consumer can never mistake an older generation for its own.
inline constexpr unsigned kRefGenerationShift = 32;
inline constexpr uint64_t kRefSlotMask = 0xffffffff;
inline constexpr uint32_t kMaxGeneration = 0xffff;
inline constexpr uint64_t kMaxSlot = 0xfffffffe;
inline constexpr uint64_t make_ref(uint64_t slot, uint32_t generation) {
  return slot | uint64_t{generation} << kRefGenerationShift;
}
inline constexpr uint64_t ref_slot(uint64_t ref) { return ref & kRefSlotMask; }
inline constexpr uint32_t ref_generation(uint64_t ref) { return uint32_t(ref >> kRefGenerationShift); }

// Steps of the program's own memory (trace format 1.1), after the calls'
// op codes. Regions get replay ids from the same counter as objects.
//   map:       id = region, size = length
//   unmap:     old = region, id = its next id, arg = offset, size = length
//   arg:       size = the old length of the remap that follows
//   remap:     old = region, id = new region, arg = offset, size = new length
//   dontneed, lazy_free: old = region, id = its next id, arg = offset, size = length
//   touch:     old = region, id = its next id, arg = offset, size = bytes to write (a byte a page)
//   touch_object: old = object, size = bytes its producing step writes (the step
//              before, flagged kStepTouchFollows, with --touch recorded)
// A region's calls each take its current id and give it the next (the same
// base address), so they run in trace order whichever threads make them.
enum StepOp : uint8_t {
  kStepMap = 64,
  kStepUnmap,
  kStepArg,
  kStepRemap,
  kStepDontneed,
  kStepLazyFree,
  kStepTouch,
  kStepTouchObject,
  kStepEnd,
  // Not a call: a slot another replay thread gave back is reused here, so
  // wait until that thread has made `size` steps (its last consume of the
  // slot is among them). old = that replay thread. The builder hands slots
  // between threads in batches, long after they were freed: rarely a wait.
  kStepHandoff = 80,
  // Not a call: what the step after it has no room for in its 16 bytes
  // (PlanStep): ref = its old, val = its arg.
  kStepExt = 81,
  // Not a call: the recorded thread this replay thread ran has ended, and
  // another that started after it goes on here (a replay thread that runs
  // recorded threads one after another, fold_threads): the steps after it
  // run on a new thread, which the one before starts and then exits, and
  // which joins it before its first step, as the program's ended and
  // started. Its time is the step before's. ref and val 0.
  kStepNewThread = 82,
};
inline constexpr unsigned kStepFirstMemory = kStepMap;
inline constexpr unsigned kMemorySteps = kStepEnd - kStepMap;
// Flag on a producing step whose object has a recorded resident-page count
// (its touch_object step follows): with --touch recorded, made() leaves it.
inline constexpr uint8_t kStepTouchFollows = 0x80;
// Flag on a call the program timed inside its allocator (heaplab capture
// --latency): `--latency-of program` times exactly these.
inline constexpr uint8_t kStepProgramTimed = 0x40;
const char* memory_step_name(unsigned op);

// A step as the plan's file holds it, and the engine runs it: 16 bytes.
//   head = op | flags << 8 | ref << 16
//   val  = size (a handoff: the steps to wait for)
// ref is the object produced (regions: the region's next id), except where
// ref_is_old(op): the object consumed by calls that only consume (free, the
// deletes), the object of a touch_object, the replay thread a handoff waits
// for. A step with more to say (the object a realloc or a region call
// consumes besides what it produces; an element count or an alignment)
// comes right after a kStepExt step: ref = its old, val = its arg. Malloc,
// new, free and the (sized) deletes, most of a program's calls, take 16
// bytes; realloc, calloc and the aligned calls 32.
struct PlanStep {
  uint64_t head;
  uint64_t val;

  unsigned op() const { return unsigned(head & 0xff); }
  uint8_t flags() const { return static_cast<uint8_t>(head >> 8); }
  uint64_t ref() const { return head >> 16; }
};
static_assert(sizeof(PlanStep) == 16);

constexpr bool ref_is_old(unsigned op) {
  return op == kStepTouchObject || op == kStepHandoff ||
         (op < trace::kOpCount && trace::op_consumes(trace::Op(op)) && !trace::op_produces(trace::Op(op)));
}

// `s` packed into out[0, n) (n = 1, or 2 with its kStepExt first).
inline unsigned pack_step(const Step& s, PlanStep out[2]) {
  const unsigned op = unsigned(s.head & 0xff);
  const bool by_old = ref_is_old(op);
  const uint64_t old = by_old ? 0 : s.old;
  unsigned n = 0;
  if (old != 0 || s.arg != 0) out[n++] = PlanStep{uint64_t{kStepExt} | old << 16, s.arg};
  out[n++] = PlanStep{(s.head & 0xffff) | (by_old ? s.old : s.id()) << 16, s.size};
  return n;
}

// The step `p` packs, with `ext` the kStepExt step right before it (or
// nullptr): the inverse of pack_step.
inline Step unpack_step(const PlanStep& p, const PlanStep* ext) {
  Step s{};
  if (ref_is_old(p.op())) {
    s.head = p.head & 0xffff;
    s.old = p.ref();
  } else {
    s.head = p.head;
    s.old = ext ? ext->ref() : 0;
  }
  s.size = p.val;
  s.arg = ext ? ext->val : 0;
  return s;
}

inline constexpr uint64_t kMaxObjectId = (uint64_t{1} << 48) - 1;
// About how many bytes of plan a replayer maps at once, all threads
// together (replay/plan_pager.h).
inline constexpr uint64_t kPlanWindowBudget = uint64_t{64} << 20;
inline constexpr uint64_t kNoPeak = ~uint64_t{0};

// Checksums of a plan's arrays, so that a kept plan changed on disk after
// its build is found, even where every step is still one the engine could
// run: one XXH3-64 per kPlanSumEntries entries of each replay thread's
// steps, times and live sums (the last chunk of an array as long as what
// is left), seeded with the thread, the chunk and the array: 1/1024 of the
// steps, 1/512 of the times and live sums. Written as the plan is built;
// compared (plan_sums_damage) when a kept plan is found,
// before any replay runs on it, so that the replays' own times do not pay
// for it.
inline constexpr uint64_t kPlanSumEntries = 512;
enum class PlanArray : unsigned { steps = 0, times = 1, live = 2 };
inline constexpr uint64_t plan_sum_count(uint64_t entries) { return (entries + kPlanSumEntries - 1) / kPlanSumEntries; }
// The checksum of chunk `chunk` of replay thread t's array `a`: `bytes` at `data`.
uint64_t plan_chunk_sum(const void* data, size_t bytes, uint32_t t, uint64_t chunk, PlanArray a);
class MappedPlan;
// Every chunk of `plan` (mapped from `fd`) against its checksum, on up to
// `threads` threads, read with pread 4 MiB at a time: "" if all match, else
// the first that does not, named ("plan: thread 0 steps 512 to 1023 do not
// match their checksum (their live bytes: ...)"), or that cannot be read
// ("plan: thread 0 steps 0 to 262143 cannot be read: ...").
std::string plan_sums_damage(int fd, const MappedPlan& plan, unsigned threads = 2);

struct PlanOptions {
  // Replay threads; 0 = one per recorded thread. Fewer than the recorded
  // threads folds them: each replay thread runs the calls of its recorded
  // threads in their recorded global order.
  uint32_t threads = 0;
  // Also store each call's recorded time (for replaying at recorded pace).
  bool times = false;
  // Also store, per step, the replay thread's running sum of requested
  // bytes produced minus consumed (signed): the live bytes at any moment
  // of a replay are the sum over threads at their progress.
  bool live = false;
  // Reuse a consumed object's table slot (the table follows the live
  // objects). Off: every object keeps its own slot to the end (tests that
  // look at the table after a replay).
  bool reuse_slots = true;
  // Build on three threads: one decodes and merges the trace ahead, one
  // writes the arrays, this one plans (the same plan). Off: this thread
  // does all (the replayer building its own plan, where the allocator
  // under test is loaded, and the builder's threads would leave their
  // arenas and caches in it). Not part of the plan's name.
  bool helpers = true;
  // Stop the build with PlanLiveLimit as soon as the trace's live requested
  // bytes pass this (the memory a replay that writes its heap has: the
  // caller's; 0 for none): a trace whose heap cannot fit is refused where
  // its heap passes the limit, not after a build of its whole length. Not
  // part of the plan's name.
  uint64_t live_limit = 0;
  // The plan is to be synced to disk once built (a plan kept for later
  // commands): its pages are sent to the disk as they are written, so that
  // the final sync waits for the last few only. Not part of the plan's name.
  bool writeback = false;
};

// The calls of one op the program timed inside its allocator (heaplab
// capture --latency; FORMAT.md's MEMX `latency` records).
struct ProgramLatency {
  uint8_t op = 0;
  uint64_t samples = 0;
  double mean_ns = 0;
  uint64_t p50_ns = 0, p90_ns = 0, p99_ns = 0;  // the upper end of the quantile's bucket
  bool operator==(const ProgramLatency&) const = default;
};

// What the plan builder learned about the trace, in trace order.
struct PlanSummary {
  uint64_t events = 0;                          // all events of the trace
  uint64_t steps = 0;                           // PlanSteps: calls, memory calls, handoffs, kStepExt
  std::array<uint64_t, trace::kOpCount> ops{};  // calls per op in the plan
  uint64_t skipped_lost = 0;                    // consumes of objects a truncated trace lost, dropped
  uint64_t realloc_of_lost = 0;                 // reallocs of such objects, replayed with NULL
  // Calls an allocator may crash on, corrected in the plan: a sized delete
  // whose size is not the object's, an alignment that is not a power of two
  // or (aligned deletes) not the object's.
  uint64_t sizes_corrected = 0;
  uint64_t alignments_corrected = 0;
  uint64_t objects = 0;        // objects the trace creates
  uint64_t max_id = 0;         // replay ids given (objects, kept objects, regions)
  uint64_t slots = 0;          // the object table's largest slot (its size less 1)
  uint64_t slots_retired = 0;  // slots never reused (a generation at its limit)
  uint64_t handoffs = 0;       // kStepHandoff steps
  // Replay threads that run their recorded threads one after another (each
  // ended before the next started), and the kStepNewThread steps between them.
  bool sequential = false;
  uint64_t new_threads = 0;
  uint64_t live_bytes_peak = 0;  // peak of the live requested bytes, trace order
  uint64_t live_bytes_end = 0;
  // Where the live bytes first reach their peak (trace order): the replay
  // thread and its step index; kNoPeak if nothing is ever live.
  uint32_t peak_thread = 0;
  uint64_t peak_step = kNoPeak;
  uint64_t bytes_requested = 0;
  uint64_t cross_thread_consumes = 0;  // consumes of objects another replay thread produced
  uint32_t recorded_threads = 0;
  uint32_t replay_threads = 0;
  std::vector<std::vector<uint32_t>> fold;  // per replay thread: its recorded threads
  bool has_times = false;
  bool has_live = false;
  uint64_t duration_ns = 0;  // latest recorded time (0 without timestamps)
  // The program's own memory (format 1.1): steps per kind (index op - kStepMap).
  std::array<uint64_t, kMemorySteps> memory_ops{};
  uint64_t regions = 0;
  uint64_t mapped_peak = 0;       // peak of the bytes mapped, trace order
  uint64_t recorded_touches = 0;  // objects with a recorded resident-page count
  uint64_t unknown_regions = 0;   // memory events naming a region never mapped: dropped
  // Calls the program timed inside its allocator (flagged kStepProgramTimed),
  // per op: a summary, not the samples.
  std::vector<ProgramLatency> program_latency;
};

// Builds the plan of `r` into `fd` (an empty file the caller made; its
// disk space is reserved first) or, with -1, into a new memfd, and returns
// the descriptor (the caller owns it). Throws PlanError for an inconsistent
// trace (a call on an object that is not live, ids out of order), naming
// the event; the replay would otherwise wait forever or free garbage; or
// for a file that cannot take the plan. `fd` is closed whatever it throws.
// `event_refs` (only with opt.reuse_slots off): for each event, in merged
// (seq) order, the ref of the object whose address it names in a replay:
// the one it produced, else the one it consumed, else 0. With every object
// in its own slot, the replay's table then holds each event's address.
int build_plan(const trace::TraceReader& r, const PlanOptions& opt, PlanSummary& summary, int fd = -1,
               std::vector<uint64_t>* event_refs = nullptr);

// The disk space `r`'s plan takes at least, from the trace's index alone
// (no decoding): what build_plan reserves first. (Its calls with a kStepExt
// take more, up to twice as much; the file is sized for that, and what is
// not used is given back.)
uint64_t plan_bytes(const trace::TraceReader& r, const PlanOptions& opt);
// The most it can take: its file's size (what a plan held in memory is
// checked against).
uint64_t plan_bytes_at_most(const trace::TraceReader& r, const PlanOptions& opt);

class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A plan that could not be mapped (an address-space limit, no memory): the
// process's trouble, not the plan's.
class PlanMapError : public PlanError {
 public:
  using PlanError::PlanError;
};

// The build stopped at PlanOptions::live_limit (`limit`): the live
// requested bytes were `live_bytes` at the `event`th event read (of
// `events` in the trace).
class PlanLiveLimit : public PlanError {
 public:
  PlanLiveLimit(uint64_t live, uint64_t at, uint64_t of, uint64_t lim)
      : PlanError("the trace's live heap passes the replay's limit"),
        live_bytes(live),
        event(at),
        events(of),
        limit(lim) {}
  uint64_t live_bytes, event, events, limit;
};

// XXH3-64 of a plan's header and thread table (what says what its steps
// are, and where): kept beside a kept plan, checked when it is found, so
// that damage there is a plan built again, not a replay that counts other
// calls. Throws PlanError if `fd` is not a plan.
uint64_t plan_head_hash(int fd);

// A plan mapped read-only (by the replayer).
class MappedPlan {
 public:
  // Maps the plan in `fd`; throws PlanError if it is not a plan.
  explicit MappedPlan(int fd);
  ~MappedPlan();
  MappedPlan(const MappedPlan&) = delete;
  MappedPlan& operator=(const MappedPlan&) = delete;

  const void* base() const { return map_; }  // the mapping (trace::guard_mapping_report)
  uint32_t threads() const { return threads_; }
  uint64_t max_id() const { return max_id_; }  // replay ids given
  uint64_t slots() const { return slots_; }    // the object table's largest slot
  uint64_t total_steps() const { return total_steps_; }
  bool has_times() const { return times_; }
  bool has_live() const { return live_; }
  // Bytes of plan per step: the step, and its recorded time and live sum if any.
  uint64_t step_bytes() const { return sizeof(PlanStep) + (times_ ? 8 : 0) + (live_ ? 8 : 0); }
  const PlanStep* steps(uint32_t t) const { return steps_[t]; }
  uint64_t step_count(uint32_t t) const { return counts_[t]; }
  // Recorded time of each step (ns since capture start), or nullptr.
  const uint64_t* times(uint32_t t) const { return time_[t]; }
  // Thread t's running live-bytes delta after each step, or nullptr.
  const int64_t* live(uint32_t t) const { return livearr_[t]; }
  // The checksums of thread t's array `a` (plan_chunk_sum), or nullptr
  // where it has no such array.
  const uint64_t* sums(uint32_t t, PlanArray a) const { return sums_[t][unsigned(a)]; }
  const std::array<uint64_t, trace::kOpCount>& expected_ops() const { return ops_; }
  const std::array<uint64_t, kMemorySteps>& expected_memory_ops() const { return memory_ops_; }
  size_t mapped_bytes() const { return len_; }
  // The plan's bytes: its header, steps, times, live sums and checksums. (The file's
  // size leaves room for a kStepExt before every call, which few plans use.)
  uint64_t stored_bytes() const { return stored_; }
  // The step after which the trace's live bytes first reach their peak:
  // replay thread and step index (kNoPeak: none).
  uint32_t peak_thread() const { return peak_thread_; }
  uint64_t peak_step() const { return peak_step_; }
  uint64_t live_bytes_peak() const { return live_peak_; }

 private:
  void load();
  void* map_ = nullptr;
  size_t len_ = 0;
  uint64_t stored_ = 0;
  uint32_t threads_ = 0;
  uint64_t max_id_ = 0, slots_ = 0, total_steps_ = 0;
  bool times_ = false;
  std::vector<const PlanStep*> steps_;
  std::vector<const uint64_t*> time_;
  bool live_ = false;
  std::vector<const int64_t*> livearr_;
  std::vector<std::array<const uint64_t*, 3>> sums_;
  std::vector<uint64_t> counts_;
  std::array<uint64_t, trace::kOpCount> ops_{};
  std::array<uint64_t, kMemorySteps> memory_ops_{};
  uint32_t peak_thread_ = 0;
  uint64_t peak_step_ = kNoPeak, live_peak_ = 0;
};

// Which replay thread each recorded thread goes to, for `threads` replay
// threads (0: as the program ran them). Returns per replay thread its
// recorded threads. Recorded threads that never ran at the same time share
// a replay thread, one after another (*sequential set; its recorded threads
// in the order they started), where `threads` is 0 or at least as many as
// ever ran at once and fewer than all (then as many replay threads as ran
// at once, not `threads`): a recorded thread runs from its first event (or
// memory call) to its thread_end event, or to the end of the trace without
// one, or where the trace does not say its thread_ends were written once
// the threads were found gone (capture.thread_ends, FORMAT.md). Else, with
// `threads` below the recorded threads, largest first onto the least loaded
// (by event count; sorted); else one each. (TraceReader::thread_end_seq
// decodes each thread's last chunk, once a reader.)
std::vector<std::vector<uint32_t>> fold_threads(const trace::TraceReader& r, uint32_t threads,
                                                bool* sequential = nullptr);
// The most recorded threads that ran at once (as fold_threads takes them).
uint32_t threads_at_once(const trace::TraceReader& r);

}  // namespace heaplab::replay
