#include "replay/plan.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include "capture/format/flat_map.h"

namespace heaplab::replay {

using trace::Event;
using trace::Op;

namespace {

// File layout: a header page (PlanHeader, then one PlanThread per replay
// thread; more pages if there are many threads), then per thread its steps,
// then per thread its times (if any). Arrays start on page boundaries.
constexpr char kMagic[8] = {'H', 'L', 'P', 'L', 'A', 'N', 0, 1};
constexpr uint32_t kPlanVersion = 1;
constexpr uint64_t kPage = 4096;

struct PlanHeader {
  char magic[8];
  uint32_t version;
  uint32_t threads;
  uint64_t max_id;
  uint64_t total_steps;
  uint64_t has_times;
  uint64_t ops[trace::kOpCount];
};

struct PlanThread {
  uint64_t steps_offset;
  uint64_t steps;
  uint64_t times_offset;  // 0 = none
};

uint64_t page_up(uint64_t v) { return (v + kPage - 1) & ~(kPage - 1); }

void write_all(int fd, const void* data, size_t len, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = pwrite(fd, p, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw PlanError(std::string("writing the replay plan: ") + std::strerror(errno));
    p += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

__extension__ typedef unsigned __int128 uint128;
uint64_t saturate(uint128 v) { return v > UINT64_MAX ? UINT64_MAX : uint64_t(v); }

struct Live {
  uint64_t bytes;
  uint32_t thread;  // replay thread that produced it
};

[[noreturn]] void inconsistent(const Event& e, const std::string& what) {
  throw PlanError("inconsistent trace: event " + std::to_string(e.seq) + " (thread " +
                  std::to_string(e.thread) + ", " + std::string(trace::op_name(e.op)) +
                  "): " + what);
}

}  // namespace

std::vector<std::vector<uint32_t>> fold_threads(const trace::TraceReader& r, uint32_t threads) {
  const auto& active = r.active_threads();
  std::vector<std::vector<uint32_t>> fold;
  if (threads == 0 || threads >= active.size()) {
    for (uint32_t t : active) fold.push_back({t});
    return fold;
  }
  std::vector<uint32_t> order(active);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return r.thread_event_count(a) > r.thread_event_count(b);
  });
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

int build_plan(const trace::TraceReader& r, const PlanOptions& opt, PlanSummary& s) {
  s = PlanSummary{};
  s.fold = fold_threads(r, opt.threads);
  s.recorded_threads = static_cast<uint32_t>(r.active_threads().size());
  s.replay_threads = static_cast<uint32_t>(s.fold.size());
  s.has_times = opt.times && r.has_time();
  std::vector<uint32_t> replay_of(r.thread_count(), 0);
  for (uint32_t k = 0; k < s.fold.size(); ++k)
    for (uint32_t t : s.fold[k]) replay_of[t] = k;

  std::vector<std::vector<Step>> steps(s.fold.size());
  std::vector<std::vector<uint64_t>> times(s.fold.size());
  for (uint32_t k = 0; k < s.fold.size(); ++k) {
    uint64_t n = 0;
    for (uint32_t t : s.fold[k]) n += r.thread_event_count(t);
    steps[k].reserve(n);
    if (s.has_times) times[k].reserve(n);
  }

  FlatMap<Live> live;
  uint128 live_bytes = 0, requested = 0;
  const bool complete = r.complete();
  trace::MergedCursor cur(r);
  std::vector<Event> buf(4096);
  for (;;) {
    const size_t n = cur.next(buf.data(), buf.size());
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) {
      const Event& e = buf[i];
      ++s.events;
      if (r.has_time()) s.duration_ns = std::max(s.duration_ns, e.time);
      if (!trace::op_valid(static_cast<unsigned>(e.op)) || e.op == Op::thread_start ||
          e.op == Op::thread_end || e.op == Op::lost)
        continue;
      const uint32_t k = replay_of[e.thread];
      Step st{};
      st.size = e.size;
      st.arg = trace::op_has(e.op, trace::kCount) ? e.count : e.align;
      uint64_t old = 0;
      if (trace::op_consumes(e.op) && e.old != 0) {
        const bool failed = e.flags & trace::kFailed;
        Live o{};
        const bool was_live = failed ? (live.find(e.old) ? (o = *live.find(e.old), true) : false)
                                     : live.erase(e.old, &o);
        if (!was_live) {
          if (complete)
            inconsistent(e, "object " + std::to_string(e.old) +
                                (e.old > s.max_id ? " does not exist yet"
                                                  : " was already freed"));
          // A truncated trace lost the chunk that produced it.
          if (e.op != Op::realloc && e.op != Op::reallocarray) {
            ++s.skipped_lost;
            continue;
          }
          ++s.realloc_of_lost;
        } else {
          old = e.old;
          if (o.thread != k) ++s.cross_thread_consumes;
          if (!failed) live_bytes -= o.bytes;
        }
      }
      uint64_t id = 0;
      if (trace::op_produces(e.op) && !(e.flags & trace::kNullResult)) {
        if (e.id == 0 || e.id > kMaxObjectId)
          inconsistent(e, "object id " + std::to_string(e.id) + " is out of range");
        if (e.id <= s.max_id || (complete && e.id != s.max_id + 1))
          inconsistent(e, "object " + std::to_string(e.id) + " is out of order (expected " +
                              std::to_string(s.max_id + 1) + ")");
        id = s.max_id = e.id;
        const uint64_t b = e.requested_bytes();
        live.put(id, Live{b, k});
        live_bytes += b;
        requested += b;
        s.live_bytes_peak = std::max(s.live_bytes_peak, saturate(live_bytes));
      } else if (e.id != 0) {
        inconsistent(e, "object id " + std::to_string(e.id) + " given for a call without result");
      }
      st.head = static_cast<uint64_t>(e.op) | uint64_t{e.flags} << 8 | id << 16;
      st.old = old;
      steps[k].push_back(st);
      if (s.has_times) times[k].push_back(e.time);
      ++s.ops[static_cast<unsigned>(e.op)];
      ++s.steps;
    }
  }
  s.live_bytes_end = saturate(live_bytes);
  s.bytes_requested = saturate(requested);

  // Lay out and write the plan.
  const uint64_t header_bytes =
      page_up(sizeof(PlanHeader) + sizeof(PlanThread) * s.fold.size());
  std::vector<PlanThread> table(s.fold.size());
  uint64_t off = header_bytes;
  for (size_t k = 0; k < steps.size(); ++k) {
    table[k].steps_offset = off;
    table[k].steps = steps[k].size();
    off = page_up(off + steps[k].size() * sizeof(Step));
  }
  if (s.has_times)
    for (size_t k = 0; k < steps.size(); ++k) {
      table[k].times_offset = off;
      off = page_up(off + times[k].size() * sizeof(uint64_t));
    }
  const uint64_t total = std::max(off, kPage);

  const int fd = memfd_create("heaplab-plan", MFD_CLOEXEC);
  if (fd < 0) throw PlanError(std::string("memfd_create: ") + std::strerror(errno));
  try {
    if (ftruncate(fd, static_cast<off_t>(total)) != 0)
      throw PlanError(std::string("sizing the replay plan: ") + std::strerror(errno));
    PlanHeader h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.version = kPlanVersion;
    h.threads = s.replay_threads;
    h.max_id = s.max_id;
    h.total_steps = s.steps;
    h.has_times = s.has_times;
    std::copy(s.ops.begin(), s.ops.end(), h.ops);
    write_all(fd, &h, sizeof h, 0);
    write_all(fd, table.data(), table.size() * sizeof(PlanThread), sizeof h);
    for (size_t k = 0; k < steps.size(); ++k) {
      write_all(fd, steps[k].data(), steps[k].size() * sizeof(Step), table[k].steps_offset);
      std::vector<Step>().swap(steps[k]);
      if (s.has_times) {
        write_all(fd, times[k].data(), times[k].size() * sizeof(uint64_t), table[k].times_offset);
        std::vector<uint64_t>().swap(times[k]);
      }
    }
  } catch (...) {
    close(fd);
    throw;
  }
  return fd;
}

MappedPlan::MappedPlan(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw PlanError(std::string("plan: ") + std::strerror(errno));
  len_ = static_cast<size_t>(st.st_size);
  if (len_ < sizeof(PlanHeader)) throw PlanError("plan: too short to be a replay plan");
  // MAP_POPULATE: the plan's pages are faulted in now, not during the replay.
  map_ = mmap(nullptr, len_, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw PlanError(std::string("plan: mmap: ") + std::strerror(errno));
  }
  const auto* base = static_cast<const char*>(map_);
  PlanHeader h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kPlanVersion)
    throw PlanError("plan: not a heaplab replay plan of version " + std::to_string(kPlanVersion));
  if (h.threads == 0 && h.total_steps != 0) throw PlanError("plan: steps without threads");
  if (sizeof h + uint64_t{h.threads} * sizeof(PlanThread) > len_)
    throw PlanError("plan: thread table past the end");
  threads_ = h.threads;
  max_id_ = h.max_id;
  total_steps_ = h.total_steps;
  times_ = h.has_times;
  std::copy(h.ops, h.ops + trace::kOpCount, ops_.begin());
  uint64_t sum = 0;
  for (uint32_t k = 0; k < threads_; ++k) {
    PlanThread t;
    std::memcpy(&t, base + sizeof h + k * sizeof t, sizeof t);
    const auto fits = [&](uint64_t off, uint64_t n, uint64_t width) {
      return off % 8 == 0 && off <= len_ && n <= (len_ - off) / width;
    };
    if (!fits(t.steps_offset, t.steps, sizeof(Step)) ||
        (times_ && !fits(t.times_offset, t.steps, sizeof(uint64_t))))
      throw PlanError("plan: thread " + std::to_string(k) + "'s arrays lie past the end");
    steps_.push_back(reinterpret_cast<const Step*>(base + t.steps_offset));
    time_.push_back(times_ ? reinterpret_cast<const uint64_t*>(base + t.times_offset) : nullptr);
    counts_.push_back(t.steps);
    sum += t.steps;
  }
  if (sum != total_steps_) throw PlanError("plan: thread step counts do not add up");
}

MappedPlan::~MappedPlan() {
  if (map_) munmap(map_, len_);
}

}  // namespace heaplab::replay
