// The plan in windows: the replayer keeps only a few windows of each replay
// thread's steps (and recorded times and live-bytes sums) mapped, whatever
// the trace's length. A thread of its own maps and checks the windows ahead
// of each replay thread's progress (MADV_POPULATE_READ, so the replay thread
// takes no page faults for them) and drops the ones it has left behind
// (MADV_DONTNEED: the plan's file keeps them; only the mapping goes).
//
// A replay thread runs one window at a time and starts a window only once
// it is checked (ready()): the engine never runs a step the replayer has
// not checked (replay/plan.h's promises: ops are calls, refs fit the table,
// a handoff names another thread and steps it has). When the pager is
// ahead, as it should be, ready() costs one load.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "common/progress.h"
#include "replay/engine.h"
#include "replay/plan.h"

namespace heaplab::replay {

class PlanPager {
 public:
  // Steps per window for `threads` replay threads: about `budget_bytes` of
  // plan mapped in all (at most 4 windows a thread), a power of two between
  // 512 and 131072 steps. HEAPLAB_PLAN_WINDOW_STEPS (a power of two, at
  // least 512) sets it instead.
  static uint64_t window_steps(const MappedPlan& plan, uint64_t budget_bytes = kPlanWindowBudget);

  // `damaged(message)` is called (from any thread) when a window holds a step
  // the replay cannot run; it must not return (the replayer reports and exits).
  // `label`: what the progress line on a terminal says (common/progress.h).
  PlanPager(const MappedPlan& plan, const ThreadResult* results, uint64_t window,
            std::function<void(const std::string&)> damaged, const std::string& label = "replaying");
  ~PlanPager();
  PlanPager(const PlanPager&) = delete;
  PlanPager& operator=(const PlanPager&) = delete;

  // Maps and checks every thread's first windows (before the replay starts).
  void prime();
  // Maps and checks every window of every thread on the calling thread,
  // leaving them mapped (the fuzz target; a replay starts the pager's own
  // thread instead).
  void check_all();
  void start();
  void stop();

  // Called by replay thread t at step `pos`: waits until the window holding
  // `pos` is mapped and checked, and returns where that window ends.
  uint64_t ready(uint32_t t, uint64_t pos, ThreadResult& r) {
    const uint64_t end = std::min(counts_[t], (pos / window_ + 1) * window_);
    if (__builtin_expect(lanes_[t].checked.load(std::memory_order_acquire) < end, 0)) wait_ready(t, end, r);
    return end;
  }

  uint64_t window() const { return window_; }
  // Its own memory (from mmap, never from the allocator under test).
  const void* own_memory() const { return lanes_; }
  size_t own_bytes() const { return own_bytes_; }
  // The most plan bytes mapped at once (what the pager populated and had
  // not dropped yet), and how many windows it mapped.
  uint64_t resident_peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  // The most plan bytes it may map at once, whatever the replay threads'
  // pace: 4 windows a thread (the one in use, the one before, two ahead),
  // fewer for a thread with fewer steps. resident_peak_bytes() reaches it
  // when the pager keeps ahead; on a loaded machine it may fall short.
  uint64_t resident_most_bytes() const;
  uint64_t windows_mapped() const { return windows_.load(std::memory_order_relaxed); }

 private:
  struct alignas(64) Lane {
    std::atomic<uint64_t> checked{0};  // steps [0, checked) are mapped and checked
    uint64_t dropped = 0;              // steps [0, dropped) are no longer mapped
  };
  static void* thread_main(void* self);
  void run();
  // Maps and checks thread t's next window; false if it has none left.
  bool advance(uint32_t t);
  void drop(uint32_t t, uint64_t upto);
  void check(uint32_t t, uint64_t from, uint64_t to) const;
  void add_resident(int64_t bytes);
  [[gnu::noinline, gnu::cold]] void wait_ready(uint32_t t, uint64_t end, ThreadResult& r);

  const MappedPlan& plan_;
  const ThreadResult* results_;
  uint64_t window_;
  std::function<void(const std::string&)> damaged_;
  uint64_t* counts_ = nullptr;  // per thread: its steps (in the mapping after the lanes)
  Lane* lanes_ = nullptr;
  size_t own_bytes_ = 0;
  uint64_t step_bytes_;  // bytes of plan per step (steps, times, live sums)
  std::atomic<uint64_t> peak_{0}, windows_{0};
  uint64_t resident_ = 0;  // (the pager thread's, or prime()'s before it starts)
  std::string label_;
  common::Progress progress_;
  std::atomic<uint32_t> stop_{0};  // (a futex word: stop() wakes run()'s wait at once)
  pthread_t thread_{};
  bool running_ = false;
};

}  // namespace heaplab::replay
