// Memory over time during a replay: a thread of its own reads the
// process's resident and anonymous pages (/proc/self/statm) every interval,
// and at the same instant the live requested bytes (the plan's running
// live-bytes sums at each replay thread's progress). The heap's RSS is the
// anonymous RSS less the replayer's own bookkeeping (object table, results,
// histograms: mmap'd and fully populated before the start, so a constant);
// the plan is a shared mapping, never counted as anonymous.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <pthread.h>

#include <atomic>
#include <string>

#include "replay/engine.h"
#include "replay/footprint.h"
#include "replay/plan.h"

namespace heaplab::replay {

struct MemorySample {
  uint64_t t_ns;        // since the replay started
  uint64_t rss_bytes;   // resident
  uint64_t anon_bytes;  // resident and not file-backed or shared
  int64_t live_bytes;   // requested bytes live, summed over replay threads
};

class MemorySampler {
 public:
  // `plan` must have live arrays; `results` are the replay threads' (for
  // their progress); `bookkeeping` is the anonymous bytes the replayer
  // itself holds (the sampler adds its own).
  MemorySampler(uint32_t interval_ms, const MappedPlan& plan, const ThreadResult* results, uint64_t bookkeeping,
                class Pinning* pin = nullptr);
  ~MemorySampler();
  MemorySampler(const MemorySampler&) = delete;
  MemorySampler& operator=(const MemorySampler&) = delete;

  // Takes the first sample at `start_ns` and starts the sampling thread.
  void start(uint64_t start_ns);
  // Stops the thread and takes the last sample (after the replay).
  void stop();
  nlohmann::json to_json() const;
  size_t samples() const { return n_; }
  // Leaves the replayer's own mapping out of the page footprint.
  void exclude(const void* p, size_t len) {
    footprint_.exclude(p, len);
    snap_fp_.exclude(p, len);
  }
  // Called once, by the replay thread that has just made the call at which
  // the trace's live bytes reach their peak: a sample (and the page
  // footprint) at that instant, which periodic samples can miss. Safe while
  // the sampling thread runs; allocation-free.
  void snapshot();

 private:
  static void* thread_main(void* self);
  void take();
  bool read(MemorySample& m);
  void halve();  // the buffer is full: keep every other sample, double the interval

  uint64_t interval_ns_;
  const MappedPlan& plan_;
  const ThreadResult* results_;
  uint64_t bookkeeping_;
  class Pinning* pin_;
  int statm_fd_ = -1;
  uint64_t page_ = 4096;
  MemorySample* buf_ = nullptr;  // mmap'd
  size_t cap_ = 0, n_ = 0;
  uint64_t start_ns_ = 0;
  std::atomic<uint32_t> stop_{0};  // a futex word: stop() wakes the sampling thread from its wait
  pthread_t thread_{};
  bool running_ = false;
  // Page footprint (mincore): when the live bytes reach a new high (by 5%),
  // and at the end.
  FootprintCounter footprint_;
  int64_t fp_live_ = -1;
  int64_t fp_peak_pages_ = -1, fp_end_pages_ = -1;
  // The snapshot at the live peak (its own footprint counter: the
  // sampling thread may be using the other).
  FootprintCounter snap_fp_;
  MemorySample snap_{};
  int64_t snap_pages_ = -1;
  std::atomic<bool> snapped_{false};
  // Pages written during the replay (soft-dirty bits), where the kernel
  // keeps them.
  bool soft_dirty_ = false;
  std::string soft_dirty_why_;
  int64_t touched_pages_ = -1;
};

}  // namespace heaplab::replay
