#include "replay/sampler.h"

#include "replay/pinning.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace heaplab::replay {

namespace {

constexpr size_t kCapacity = size_t{1} << 16;  // samples kept (2 MiB)

// "/proc/self/status" line "NAME:   1234 kB" -> bytes (0 if absent).
uint64_t status_kib(const char* name) {
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[8192];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* p = std::strstr(buf, name);
  if (!p) return 0;
  return std::strtoull(p + std::strlen(name) + 1, nullptr, 10);
}

}  // namespace

MemorySampler::MemorySampler(uint32_t interval_ms, const MappedPlan& plan, const ThreadResult* results,
                             uint64_t bookkeeping, Pinning* pin)
    : interval_ns_(uint64_t(interval_ms) * 1000000u),
      plan_(plan),
      results_(results),
      bookkeeping_(bookkeeping),
      pin_(pin) {
  statm_fd_ = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (statm_fd_ < 0) throw std::runtime_error(std::string("/proc/self/statm: ") + std::strerror(errno));
  page_ = uint64_t(sysconf(_SC_PAGESIZE));
  cap_ = kCapacity;
  void* p = mmap(nullptr, cap_ * sizeof(MemorySample), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    close(statm_fd_);
    throw std::runtime_error(std::string("cannot map the memory samples: ") + std::strerror(errno));
  }
  buf_ = static_cast<MemorySample*>(p);
  exclude(buf_, cap_ * sizeof(MemorySample));
  soft_dirty_ = footprint_.enable_soft_dirty(soft_dirty_why_);
  // The sampler's own anonymous memory is bookkeeping too.
  bookkeeping_ +=
      (cap_ * sizeof(MemorySample) + page_ - 1) / page_ * page_ + footprint_.mapped_bytes() + snap_fp_.mapped_bytes();
}

MemorySampler::~MemorySampler() {
  if (running_) stop();
  munmap(buf_, cap_ * sizeof(MemorySample));
  close(statm_fd_);
}

bool MemorySampler::read(MemorySample& m) {
  // statm: size resident shared text lib data dt (pages); shared counts
  // file-backed and shared-memory pages, so resident - shared is anonymous.
  char text[256];
  const ssize_t n = pread(statm_fd_, text, sizeof text - 1, 0);
  if (n <= 0) return false;
  text[n] = 0;
  char* end = nullptr;
  std::strtoull(text, &end, 10);
  const uint64_t resident = std::strtoull(end, &end, 10);
  const uint64_t shared = std::strtoull(end, &end, 10);
  uint64_t live = 0;  // modulo 2^64, like the plan's sums
  for (uint32_t t = 0; t < plan_.threads(); ++t) {
    const uint64_t done = results_[t].progress.load(std::memory_order_relaxed);
    if (done) live += uint64_t(plan_.live(t)[done - 1]);
  }
  m = MemorySample{monotonic_ns() - start_ns_, resident * page_, (resident > shared ? resident - shared : 0) * page_,
                   int64_t(live)};
  return true;
}

void MemorySampler::snapshot() {
  MemorySample m;
  if (!read(m)) return;
  snap_pages_ = snap_fp_.resident_pages();
  snap_ = m;
  snapped_.store(true, std::memory_order_release);
}

void MemorySampler::take() {
  MemorySample m;
  if (!read(m)) return;
  if (n_ == cap_) halve();
  buf_[n_++] = m;
  const int64_t l = m.live_bytes;
  if (l > 0 && (fp_live_ < 0 || l > fp_live_ + fp_live_ / 20)) {
    fp_live_ = l;
    fp_peak_pages_ = footprint_.resident_pages();
  }
}

void MemorySampler::halve() {
  size_t w = 0;
  for (size_t i = 0; i < n_; i += 2) buf_[w++] = buf_[i];
  n_ = w;
  interval_ns_ *= 2;
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

void* MemorySampler::thread_main(void* self) {
  auto* s = static_cast<MemorySampler*>(self);
  if (s->pin_) s->pin_->bind(-1);
  timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  while (!s->stop_.load(std::memory_order_acquire)) {
    const uint64_t ns = uint64_t(next.tv_nsec) + s->interval_ns_;
    next.tv_sec += time_t(ns / 1000000000u);
    next.tv_nsec = long(ns % 1000000000u);
    // Until the next sample is due or stop() wakes it (a long --sample-ms
    // must not hold the end of a short replay): FUTEX_WAIT_BITSET takes
    // an absolute CLOCK_MONOTONIC time.
    while (!s->stop_.load(std::memory_order_acquire)) {
      const long rc = syscall(SYS_futex, reinterpret_cast<uint32_t*>(&s->stop_), FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG,
                              0u, &next, nullptr, FUTEX_BITSET_MATCH_ANY);
      if (rc != 0 && errno == ETIMEDOUT) break;
      if (rc != 0 && errno != EINTR && errno != EAGAIN) {
        // No futex to be had (a seccomp filter?): sleep out the interval.
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
        break;
      }
    }
    if (s->stop_.load(std::memory_order_acquire)) break;
    s->take();
  }
  return nullptr;
}

void MemorySampler::start(uint64_t start_ns) {
  start_ns_ = start_ns;
  if (soft_dirty_ && !FootprintCounter::clear_soft_dirty()) {
    soft_dirty_ = false;
    soft_dirty_why_ = "cannot clear the soft-dirty bits";
  }
  take();
  if (interval_ns_ == 0) return;
  const int err = pthread_create(&thread_, nullptr, thread_main, this);
  if (err != 0) throw std::runtime_error(std::string("cannot start the memory sampler: ") + std::strerror(err));
  running_ = true;
}

void MemorySampler::stop() {
  if (running_) {
    stop_.store(1, std::memory_order_release);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&stop_), FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, nullptr, nullptr, 0);
    pthread_join(thread_, nullptr);
    running_ = false;
  }
  take();
  fp_end_pages_ = footprint_.resident_pages();
  if (soft_dirty_) touched_pages_ = footprint_.soft_dirty_pages();
}

nlohmann::json MemorySampler::to_json() const {
  nlohmann::json j;
  const auto heap = [&](const MemorySample& s) {
    return s.anon_bytes > bookkeeping_ ? s.anon_bytes - bookkeeping_ : 0;
  };
  // The periodic samples, and the live-peak snapshot in its place in time.
  const bool snapped = snapped_.load(std::memory_order_acquire);
  std::vector<MemorySample> all(buf_, buf_ + n_);
  size_t snap_at = SIZE_MAX;
  if (snapped) {
    const auto it = std::upper_bound(all.begin(), all.end(), snap_.t_ns,
                                     [](uint64_t t, const MemorySample& m) { return t < m.t_ns; });
    snap_at = size_t(it - all.begin());
    all.insert(it, snap_);
  }
  nlohmann::json t = nlohmann::json::array(), rss = nlohmann::json::array(), anon = nlohmann::json::array(),
                 h = nlohmann::json::array(), live = nlohmann::json::array();
  size_t at_live_peak = 0;
  uint64_t heap_peak = 0;
  double heap_area = 0, live_area = 0;
  bool weighing = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const MemorySample& s = all[i];
    t.push_back(double(s.t_ns) / 1e6);
    rss.push_back(s.rss_bytes / 1024);
    anon.push_back(s.anon_bytes / 1024);
    h.push_back(heap(s) / 1024);
    live.push_back(s.live_bytes);
    // The highest live bytes seen; on a tie the snapshot, taken right at
    // the peak call.
    if (s.live_bytes > all[at_live_peak].live_bytes || (i == snap_at && s.live_bytes == all[at_live_peak].live_bytes))
      at_live_peak = i;
    heap_peak = std::max(heap_peak, heap(s));
    // Time-weighted: each sample holds until the next, from the first
    // sample with something live on (before it, the heap is the
    // allocator's own start-up, and the ratio has no meaning).
    if (s.live_bytes > 0) weighing = true;
    if (i + 1 < all.size() && weighing) {
      const double dt = double(all[i + 1].t_ns - s.t_ns);
      heap_area += double(heap(s)) * dt;
      live_area += double(std::max<int64_t>(s.live_bytes, 0)) * dt;
    }
  }
  j["source"] = "/proc/self/statm (anonymous = resident - shared)";
  j["interval_ms"] = double(interval_ns_) / 1e6;
  j["samples"] = all.size();
  j["timeline"] = {{"t_ms", t}, {"rss_kib", rss}, {"anon_kib", anon}, {"heap_kib", h}, {"live_bytes", live}};
  j["peak_rss_kib"] = status_kib("VmHWM:");
  j["final_rss_kib"] = all.empty() ? 0 : all.back().rss_bytes / 1024;
  j["heap_peak_kib"] = heap_peak / 1024;
  j["heap_final_kib"] = all.empty() ? 0 : heap(all.back()) / 1024;
  j["bookkeeping_anon_kib"] = bookkeeping_ / 1024;
  nlohmann::json fp = {{"method", "mincore over anonymous private mappings, less the replayer's own"},
                       {"page_size", page_},
                       {"at_live_high", {{"live_bytes", fp_live_}, {"pages", fp_peak_pages_}}},
                       {"at_end", {{"pages", fp_end_pages_}}}};
  if (snapped) fp["at_live_peak"] = {{"live_bytes", snap_.live_bytes}, {"pages", snap_pages_}};
  if (soft_dirty_)
    fp["touched"] = {{"method", "soft-dirty bits (/proc/self/pagemap), cleared at the start"},
                     {"pages", touched_pages_}};
  else
    fp["touched"] = {{"method", "none"},
                     {"why", soft_dirty_why_ + "; the replay's page_faults count first touches instead"}};
  j["footprint"] = fp;
  if (!all.empty()) {
    const MemorySample& p = all[at_live_peak];
    j["live_bytes_peak_sampled"] = p.live_bytes;
    j["heap_kib_at_live_peak"] = heap(p) / 1024;
    j["rss_kib_at_live_peak"] = p.rss_bytes / 1024;
    j["at_live_peak_source"] =
        at_live_peak == snap_at ? "snapshot right after the trace's live-peak call" : "periodic sample";
    j["fragmentation"] = {
        {"at_live_peak", p.live_bytes > 0 ? double(heap(p)) / double(p.live_bytes) : 0.0},
        {"time_weighted", live_area > 0 ? heap_area / live_area : 0.0},
        {"final", all.back().live_bytes > 0 ? double(heap(all.back())) / double(all.back().live_bytes) : 0.0},
        {"means", "heap RSS / live requested bytes (1.0: no overhead)"}};
  }
  return j;
}

}  // namespace heaplab::replay
