#include "replay/plan_pager.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace heaplab::replay {

namespace {

constexpr uintptr_t kPage = 4096;

// Maps [p, p + len) of the plan now (or, where the kernel cannot, reads a
// byte of every page).
void populate(const void* p, size_t len) {
  if (len == 0) return;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + len + kPage - 1) & ~(kPage - 1);
#ifdef MADV_POPULATE_READ
  if (madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_READ) == 0) return;
#endif
  for (uintptr_t a = lo; a < hi; a += kPage) (void)*reinterpret_cast<const volatile char*>(a);
}

// Unmaps [p, p + len) (page-aligned) from this process; the plan keeps it.
bool release(const void* p, size_t len) { return len == 0 || madvise(const_cast<void*>(p), len, MADV_DONTNEED) == 0; }

}  // namespace

uint64_t PlanPager::window_steps(const MappedPlan& plan, uint64_t budget_bytes) {
  if (const char* env = std::getenv("HEAPLAB_PLAN_WINDOW_STEPS"); env && *env) {
    char* end = nullptr;
    const unsigned long long w = std::strtoull(env, &end, 10);
    if (*end || w < 512 || (w & (w - 1)) != 0)
      throw std::invalid_argument(
          std::string("HEAPLAB_PLAN_WINDOW_STEPS: expected a power of two of at least 512, not '") + env + "'");
    return w;
  }
  const uint64_t per_thread = budget_bytes / (std::max<uint64_t>(1, plan.threads()) * 4 * plan.step_bytes());
  uint64_t w = 512;
  while (w * 2 <= per_thread && w < 131072) w *= 2;
  return w;
}

PlanPager::PlanPager(const MappedPlan& plan, const ThreadResult* results, uint64_t window,
                     std::function<void(const std::string&)> damaged, const std::string& label)
    : plan_(plan),
      results_(results),
      window_(window),
      damaged_(std::move(damaged)),
      step_bytes_(plan.step_bytes()),
      label_(label),
      progress_(label_.c_str(), plan.total_steps(), "steps") {
  const size_t n = std::max<uint32_t>(1, plan.threads());
  own_bytes_ = (n * sizeof(Lane) + n * sizeof(uint64_t) + kPage - 1) & ~(kPage - 1);
  void* m = mmap(nullptr, own_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (m == MAP_FAILED)
    throw std::runtime_error(std::string("cannot map the plan pager's table: ") + std::strerror(errno));
  lanes_ = static_cast<Lane*>(m);
  for (size_t t = 0; t < n; ++t) new (&lanes_[t]) Lane();
  counts_ = reinterpret_cast<uint64_t*>(lanes_ + n);
  for (uint32_t t = 0; t < plan.threads(); ++t) counts_[t] = plan.step_count(t);
}

PlanPager::~PlanPager() {
  stop();
  munmap(lanes_, own_bytes_);
}

void PlanPager::add_resident(int64_t bytes) {
  resident_ = uint64_t(int64_t(resident_) + bytes);
  if (resident_ > peak_.load(std::memory_order_relaxed)) peak_.store(resident_, std::memory_order_relaxed);
}

uint64_t PlanPager::resident_most_bytes() const {
  uint64_t steps = 0;
  for (uint32_t t = 0; t < plan_.threads(); ++t) steps += std::min(counts_[t], 4 * window_);
  return steps * step_bytes_;
}

bool PlanPager::advance(uint32_t t) {
  Lane& l = lanes_[t];
  const uint64_t from = l.checked.load(std::memory_order_relaxed);
  if (from >= counts_[t]) return false;
  const uint64_t to = std::min(counts_[t], from + window_);
  populate(plan_.steps(t) + from, (to - from) * sizeof(PlanStep));
  if (plan_.has_times()) populate(plan_.times(t) + from, (to - from) * sizeof(uint64_t));
  if (plan_.has_live()) populate(plan_.live(t) + from, (to - from) * sizeof(int64_t));
  check(t, from, to);
  add_resident(int64_t((to - from) * step_bytes_));
  windows_.fetch_add(1, std::memory_order_relaxed);
  l.checked.store(to, std::memory_order_release);
  return true;
}

void PlanPager::drop(uint32_t t, uint64_t upto) {
  Lane& l = lanes_[t];
  if (upto <= l.dropped) return;
  const uint64_t from = l.dropped, n = upto - from;  // whole windows: page-aligned in every array
  bool ok = release(plan_.steps(t) + from, n * sizeof(PlanStep));
  if (plan_.has_times()) ok = release(plan_.times(t) + from, n * sizeof(uint64_t)) && ok;
  if (plan_.has_live()) ok = release(plan_.live(t) + from, n * sizeof(int64_t)) && ok;
  if (ok) add_resident(-int64_t(n * step_bytes_));  // (else they stay mapped, and counted)
  l.dropped = upto;
}

// What the engine trusts: ops are calls, refs fit the table (a kStepExt's
// too: it is the old of the step after it), a handoff waits for another
// thread's steps that exist, a step flagged with a touch to follow has it
// next.
void PlanPager::check(uint32_t t, uint64_t from, uint64_t to) const {
  const auto ref_ok = [&](uint64_t ref) {
    return ref == 0 || ((ref >> (kRefGenerationShift + 16)) == 0 && ref_slot(ref) != 0 &&
                        ref_slot(ref) <= plan_.slots() && ref_generation(ref) != 0);
  };
  const PlanStep* s = plan_.steps(t);
  for (uint64_t i = from; i < to; ++i) {
    const unsigned op = s[i].op();
    const uint64_t ref = s[i].ref();
    const bool call = op <= static_cast<unsigned>(trace::Op::op_delete_array_aligned_nothrow);
    const bool memory = op >= kStepFirstMemory && op < kStepEnd;
    const bool touch_follows = call && (s[i].flags() & kStepTouchFollows);
    const bool handoff = op == kStepHandoff;
    const bool new_thread = op == kStepNewThread;
    if (!(call || memory || handoff || op == kStepExt || new_thread) || (!handoff && !ref_ok(ref)) ||
        (new_thread && (ref != 0 || s[i].val != 0)) ||
        (handoff && (ref >= plan_.threads() || ref == t || s[i].val > counts_[ref])) ||
        ((op == kStepMap || op == kStepRemap) && ref == 0) ||
        (touch_follows && (i + 1 >= counts_[t] || s[i + 1].op() != kStepTouchObject)))
      damaged_("plan: thread " + std::to_string(t) + " step " + std::to_string(i) + " is not a valid call");
  }
}

void PlanPager::prime() {
  for (uint32_t t = 0; t < plan_.threads(); ++t)
    for (int i = 0; i < 3 && advance(t); ++i) {
    }
}

void PlanPager::check_all() {
  for (uint32_t t = 0; t < plan_.threads(); ++t)
    while (advance(t)) {
    }
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

void PlanPager::run() {
  const uint32_t n = plan_.threads();
  while (!stop_.load(std::memory_order_relaxed)) {
    bool busy = false, all_checked = true;
    uint64_t done = 0;
    for (uint32_t t = 0; t < n; ++t) {
      all_checked = all_checked && lanes_[t].checked.load(std::memory_order_relaxed) == counts_[t];
      const uint64_t p = results_[t].progress.load(std::memory_order_relaxed);
      done += p;
      const uint64_t w = p / window_;
      // Keep the window in use and the two after it mapped, and the one
      // before it (the sampler reads the live sum of the last step made).
      if (w >= 2) drop(t, (w - 1) * window_);
      if (lanes_[t].checked.load(std::memory_order_relaxed) < std::min(counts_[t], (w + 3) * window_))
        busy |= advance(t);
    }
    progress_.update(done);
    // Every window mapped (the last three of each thread): only the
    // progress line is left to do, now and then.
    // (A wait on stop_, not a sleep: the replay's end does not wait out
    // the 50 ms. Woken, timed out or interrupted, the loop looks at stop_
    // again; with no futex to be had (a seccomp filter?), a sleep.)
    if (!busy) {
      const timespec ts{0, all_checked ? 50000000 : 200000};
      if (syscall(SYS_futex, reinterpret_cast<uint32_t*>(&stop_), FUTEX_WAIT | FUTEX_PRIVATE_FLAG, 0u, &ts, nullptr,
                  0) != 0 &&
          errno != ETIMEDOUT && errno != EINTR && errno != EAGAIN)
        nanosleep(&ts, nullptr);
    }
  }
}

void* PlanPager::thread_main(void* self) {
  static_cast<PlanPager*>(self)->run();
  return nullptr;
}

void PlanPager::start() {
  if (running_) return;
  // A small stack: its memory counts in the process's anonymous pages.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{64} << 10);
  const int err = pthread_create(&thread_, &attr, thread_main, this);
  pthread_attr_destroy(&attr);
  if (err != 0) throw std::runtime_error(std::string("cannot start the plan pager: ") + std::strerror(err));
  running_ = true;
}

void PlanPager::stop() {
  if (!running_) return;
  stop_.store(1);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&stop_), FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, nullptr, nullptr, 0);
  pthread_join(thread_, nullptr);
  running_ = false;
  progress_.finish();
}

void PlanPager::wait_ready(uint32_t t, uint64_t end, ThreadResult& r) {
  const uint64_t t0 = monotonic_ns();
  for (unsigned spins = 0; lanes_[t].checked.load(std::memory_order_acquire) < end; ++spins) detail::backoff(spins);
  ++r.plan_waits;
  r.plan_wait_ns += monotonic_ns() - t0;
}

}  // namespace heaplab::replay
