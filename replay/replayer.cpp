#include "replay/replayer.h"

#include "capture/format/mapping_guard.h"
#include "replay/environment.h"
#include "replay/pinning.h"
#include "replay/plan_pager.h"
#include "replay/sampler.h"

#include <cpuid.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

namespace heaplab::replay {

namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

uint64_t parse_u64(const std::string& opt, const char* v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-') bad(opt + ": not a number: '" + v + "'");
  return x;
}

// Memory of the replayer's own (object table, results): straight from mmap,
// never from the allocator under test.
void* map_anon(size_t len, bool populate, const char* what) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (populate ? MAP_POPULATE : 0), -1, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error(std::string("cannot map ") + what + " (" + std::to_string(len) +
                             " bytes): " + std::strerror(errno));
  return p;
}

struct Worker {
  Pinning* pin;
  int index;
  const BackendHooks* backend;
  const PlanStep* steps;
  uint64_t count;
  RunParams params;
  ThreadResult* result;
  const std::atomic<int>* go;
  // On the thread that makes the trace's live-peak call: the step after it,
  // where the sampler takes its snapshot (UINT64_MAX: none).
  uint64_t pause;
  MemorySampler* sampler;
  PlanPager* pager;
  // A replay thread that runs recorded threads one after another
  // (kStepNewThread) runs each on a thread of its own: the step the next
  // one starts at, the one before it (joined before it goes on: it has
  // exited, as the recorded one had), and the last (joined by the replay).
  uint64_t pos = 0;
  pthread_t before{};
  bool has_before = false;
  pthread_t last{};
  uint32_t done = 0;  // set once the last has made its last step
};

// Replay threads need little stack (the allocator's calls): 512 KiB lets
// traces with thousands of threads start where the default 8 MiB would not.
int start_thread(pthread_t* tid, void* (*fn)(void*), void* arg) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{512} << 10);
  const int err = pthread_create(tid, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return err;
}

void* worker_main(void* arg) {
  auto* w = static_cast<Worker*>(arg);
  w->pin->bind(w->index);
  if (w->has_before) {
    pthread_join(w->before, nullptr);
    w->has_before = false;
  } else {
    // Wait for the start: asleep (a futex), not spinning: with more threads
    // than cores, spinning ones took the CPU from the thread creating the
    // rest, and start-up grew with the square of the threads (3,000: 90 s).
    int go;
    while ((go = w->go->load(std::memory_order_acquire)) == 0) w->go->wait(0, std::memory_order_acquire);
    if (go < 0) return nullptr;  // another thread could not start: no replay
    w->result->start_ns = monotonic_ns();
  }
  const BackendHooks& b = *w->backend;
  const StepsFn fn =
      w->params.latency ? (w->params.times ? b.paced_timed : b.fast_timed) : (w->params.times ? b.paced : b.fast);
  // A window of the plan at a time (replay/plan_pager.h), each once the
  // pager has mapped and checked it.
  RunParams prm = w->params;
  prm.origin = w->steps;
  for (uint64_t pos = w->pos; pos < w->count;) {
    uint64_t end = w->pager->ready(uint32_t(w->index), pos, *w->result);
    if (w->pause > pos && w->pause < end) end = w->pause;
    fn(w->steps + pos, w->steps + end, prm, *w->result);
    if (w->result->new_thread) {
      w->result->new_thread = false;
      end = w->result->progress.load(std::memory_order_relaxed);
      if (end == w->pause) w->sampler->snapshot();
      // The next recorded thread on a thread of its own, which joins this
      // one first; where none can start, this one goes on.
      w->pos = end;
      w->before = pthread_self();
      w->has_before = true;
      pthread_t next;
      if (start_thread(&next, worker_main, w) == 0) {
        ++w->result->threads_started;
        return nullptr;
      }
      w->has_before = false;
      ++w->result->threads_not_started;
      pos = end;
      continue;
    }
    if (end == w->pause) w->sampler->snapshot();
    pos = end;
  }
  if (w->count == 0) w->result->end_ns = monotonic_ns();  // (run_steps sets it otherwise)
  w->result->cpu = sched_getcpu();
  w->last = pthread_self();
  std::atomic_ref<uint32_t> done(w->done);
  done.store(1, std::memory_order_release);
  done.notify_all();
  return nullptr;
}

// A replay that cannot go on: {"error": WHAT} on the result pipe (heaplab
// reports it; `plan_damaged`: the plan's steps were refused, so heaplab
// builds a kept one again), or where there is none (or it cannot be
// written) a line on stderr.
void report_error(int result_fd, const char* prog, const std::string& what, bool plan_damaged = false) {
  if (result_fd != 1) {
    nlohmann::json j{{"error", what}};
    if (plan_damaged) j["plan_damaged"] = true;  // (heaplab builds a kept plan again)
    const std::string out = j.dump() + "\n";
    if (write(result_fd, out.data(), out.size()) == ssize_t(out.size())) return;
  }
  std::fprintf(stderr, "%s: %s\n", prog, what.c_str());
}

double seconds(const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; }

// VmHWM of /proc/self/status (KiB): the peak RSS of this process image
// only; `fallback` if it cannot be read.
long own_peak_rss_kib(long fallback) {
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fallback;
  char buf[8192];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return fallback;
  buf[n] = 0;
  const char* p = std::strstr(buf, "\nVmHWM:");
  return p ? std::strtol(p + 7, nullptr, 10) : fallback;
}

bool invariant_tsc() {
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000007) return false;
  __get_cpuid(0x80000007, &a, &b, &c, &d);
  return d & (1u << 8);
}

// The latency timer: the TSC where it is invariant (its rate measured
// against CLOCK_MONOTONIC over 20 ms), else the monotonic clock; and its own
// cost, the median of 10,001 empty timed regions; and its resolution, the
// smallest step between two reads that differ (on some VMs the TSC moves
// in steps of ~20 ticks: shorter calls read as 0).
struct Timer {
  bool tsc = false;
  double ticks_per_ns = 1.0;
  uint64_t overhead_ticks = 0;
  uint64_t resolution_ticks = 1;
};

Timer calibrate_timer() {
  Timer t;
  t.tsc = invariant_tsc();
  if (t.tsc) {
    const uint64_t n0 = monotonic_ns(), c0 = __rdtsc();
    uint64_t n1;
    while ((n1 = monotonic_ns()) - n0 < 20000000) {
    }
    const uint64_t c1 = __rdtsc();
    t.ticks_per_ns = double(c1 - c0) / double(n1 - n0);
  }
  std::vector<uint64_t> d(10001);
  for (auto& x : d) {
    const uint64_t a = detail::tick_begin(t.tsc);
    const uint64_t b = detail::tick_end(t.tsc);
    x = b - a;
  }
  std::nth_element(d.begin(), d.begin() + long(d.size() / 2), d.end());
  t.overhead_ticks = d[d.size() / 2];
  uint64_t step = UINT64_MAX;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t a = detail::tick_begin(t.tsc);
    uint64_t b;
    while ((b = detail::tick_begin(t.tsc)) == a) {
    }
    step = std::min(step, b - a);
  }
  t.resolution_ticks = step;
  return t;
}

nlohmann::json latency_json(const LogLinearHistogram* hists, uint32_t nthreads, const Timer& timer, uint32_t every) {
  const double per_ns = timer.ticks_per_ns;
  const auto ns = [&](uint64_t ticks) { return double(ticks) / per_ns; };
  nlohmann::json j;
  j["timer"] = timer.tsc ? "tsc" : "clock_gettime";
  if (timer.tsc) j["tsc_ghz"] = per_ns;
  j["timer_overhead_ns"] = ns(timer.overhead_ticks);
  j["timer_resolution_ns"] = ns(timer.resolution_ticks);
  j["sample_every"] = every;
  j["percentiles_are"] = "upper bound of the histogram bucket (at most 3.1% above the sample)";
  nlohmann::json ops = nlohmann::json::object();
  for (unsigned op = 0; op < trace::kOpCount; ++op) {
    LogLinearHistogram h;
    for (uint32_t t = 0; t < nthreads; ++t) h.merge(hists[size_t(t) * trace::kOpCount + op]);
    if (h.count() == 0) continue;
    nlohmann::json o = {{"samples", h.count()}, {"mean_ns", ns(uint64_t(h.mean()))}};
    for (const auto& [name, q] :
         {std::pair{"p50_ns", 0.5}, {"p90_ns", 0.9}, {"p99_ns", 0.99}, {"p99.9_ns", 0.999}, {"p99.99_ns", 0.9999}})
      o[name] = ns(h.quantile(q).high);
    o["max_ns"] = ns(h.max());
    ops[std::string(trace::op_name(static_cast<trace::Op>(op)))] = o;
  }
  j["ops"] = ops;
  return j;
}

}  // namespace

ReplayerArgs parse_replayer_args(int argc, char** argv) {
  ReplayerArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) bad(opt + " needs a value");
      return argv[++i];
    };
    if (opt == "--plan-fd") {
      a.plan_fd = int(parse_u64(opt, value()));
    } else if (const SettingInfo* setting = find_setting(opt); setting && setting->kind != SettingKind::flag) {
      if (std::string why = set_setting(a.settings, *setting, value()); !why.empty()) bad(opt + ": " + why);
    } else if (opt == "--result-fd") {
      a.result_fd = int(parse_u64(opt, value()));
    } else if (opt == "--table-fd") {
      a.table_fd = int(parse_u64(opt, value()));
    } else if (opt == "--load") {
      a.load = value();
      if (a.load != "preload" && a.load != "direct") bad("--load: expected preload or direct, not '" + a.load + "'");
    } else if (opt == "--direct-library") {
      a.direct_library = value();
    } else if (opt == "--label") {
      a.label = value();
    } else if (!opt.empty() && opt[0] == '-') {
      bad("unknown option '" + opt + "'");
    } else if (a.trace.empty()) {
      a.trace = opt;
    } else {
      bad("more than one trace given ('" + a.trace + "', '" + opt + "')");
    }
  }
  if (a.trace.empty() == (a.plan_fd < 0)) bad("give either a trace or --plan-fd");
  return a;
}

int run_replayer(const ReplayerArgs& args, const BackendHooks& backend) {
  const bool paced = args.settings.timing == Timing::recorded;
  int plan_fd = args.plan_fd;
  nlohmann::json plan_info;
  if (!args.trace.empty()) {
    auto reader = trace::TraceReader::open(args.trace);
    PlanSummary summary;
    PlanOptions popt{args.settings.threads, paced, true};
    popt.helpers = false;  // (the allocator under test is loaded here)
    plan_fd = build_plan(*reader, popt, summary);
    plan_info = {{"trace", args.trace}, {"live_bytes_peak", summary.live_bytes_peak}};
  }
  // A plan whose header or thread table is refused is damaged (heaplab
  // builds a kept one again); one this process cannot map is not.
  std::unique_ptr<MappedPlan> mapped;
  try {
    mapped = std::make_unique<MappedPlan>(plan_fd);
  } catch (const PlanMapError&) {
    throw;
  } catch (const PlanError& e) {
    report_error(args.result_fd, "heaplab-replay", e.what(), true);
    _exit(2);
  }
  MappedPlan& plan = *mapped;
  if (!args.trace.empty()) close(plan_fd);
  // Cut short under the mapping by another program: said on the result pipe
  // too, as damage (heaplab builds a kept plan again).
  if (args.result_fd != 1)
    trace::guard_mapping_report(
        plan.base(), args.result_fd,
        nlohmann::json{{"error", std::string("plan: ") + trace::kShrankText}, {"plan_damaged", true}}.dump() + "\n");
  if (paced && !plan.has_times())
    throw PlanError("--timing recorded: the plan has no timestamps (the trace has no clock)");

  // Threads and memory placed (hwloc); memory bound before the allocator
  // under test allocates.
  Pinning pin(args.settings.pin, plan.threads(), args.settings.membind);
  pin.bind_memory();
  backend.init();
  const size_t table_bytes = size_t(plan.slots() + 1) * sizeof(Slot);  // slots < 2^32
  auto* table = static_cast<Slot*>(map_anon(table_bytes, true, "the object table"));
  table[0].store(kNullObject);  // "object 0" is the NULL pointer
  const uint32_t nthreads = plan.threads();
  const size_t results_bytes = std::max<size_t>(1, nthreads) * sizeof(ThreadResult);
  auto* results = static_cast<ThreadResult*>(map_anon(results_bytes, true, "the thread results"));
  for (uint32_t t = 0; t < nthreads; ++t) new (&results[t]) ThreadResult();
  auto* workers =
      static_cast<Worker*>(map_anon(std::max<size_t>(1, nthreads) * sizeof(Worker), true, "the thread table"));
  auto* tids =
      static_cast<pthread_t*>(map_anon(std::max<size_t>(1, nthreads) * sizeof(pthread_t), true, "the thread table"));

  // Latency: one histogram per op per thread, from mmap; the timer's own
  // cost measured now and subtracted from each sample.
  const bool timed = args.settings.latency || args.settings.latency_program;
  const Timer timer = timed ? calibrate_timer() : Timer{};
  LogLinearHistogram* hists = nullptr;
  const size_t hist_bytes = size_t(nthreads) * trace::kOpCount * sizeof(LogLinearHistogram);
  if (timed) {
    hists = static_cast<LogLinearHistogram*>(map_anon(std::max<size_t>(1, hist_bytes), true, "the latency histograms"));
    for (size_t i = 0; i < size_t(nthreads) * trace::kOpCount; ++i) new (&hists[i]) LogLinearHistogram();
  }
  // The plan in windows: a damaged step ends the replay with exit status 2
  // (bad input), before any replay thread reaches it.
  const int result_fd = args.result_fd;
  PlanPager pager(
      plan, results, PlanPager::window_steps(plan),
      [result_fd](const std::string& why) {
        report_error(result_fd, "heaplab-replay", why, true);
        _exit(2);
      },
      "replaying on " + (args.label.empty() ? std::string(backend.name) : args.label));
  pager.prime();
  // Memory over time (needs the plan's live-bytes sums). The bookkeeping
  // above is all anonymous and populated: a constant to subtract.
  const auto pages = [](uint64_t bytes) { return (bytes + 4095) & ~uint64_t{4095}; };
  const uint64_t bookkeeping =
      pages(table_bytes) + pages(results_bytes) + pages(std::max<size_t>(1, nthreads) * sizeof(Worker)) +
      pages(std::max<size_t>(1, nthreads) * sizeof(pthread_t)) + (hists ? pages(hist_bytes) : 0) + pager.own_bytes();
  std::unique_ptr<MemorySampler> sampler;
  if (plan.has_live()) {
    sampler = std::make_unique<MemorySampler>(args.settings.sample_ms, plan, results, bookkeeping, &pin);
    sampler->exclude(table, table_bytes);
    sampler->exclude(results, results_bytes);
    sampler->exclude(workers, std::max<size_t>(1, nthreads) * sizeof(Worker));
    sampler->exclude(tids, std::max<size_t>(1, nthreads) * sizeof(pthread_t));
    if (hists) sampler->exclude(hists, hist_bytes);
    sampler->exclude(pager.own_memory(), pager.own_bytes());
  }
  std::atomic<int> go{0};
  for (uint32_t t = 0; t < nthreads; ++t) {
    RunParams prm;
    if (hists) {
      prm.latency = hists + size_t(t) * trace::kOpCount;
      prm.sample_every = args.settings.latency ? args.settings.latency : 1;
      prm.program_calls = args.settings.latency_program;
      prm.tsc = timer.tsc;
      prm.timer_overhead = timer.overhead_ticks;
    }
    prm.table = table;
    prm.peers = results;
    prm.touch = args.settings.touch;
    prm.times = paced ? plan.times(t) : nullptr;
    prm.speed = args.settings.speed;
    const bool peak = sampler && plan.peak_step() != kNoPeak && plan.peak_thread() == t;
    workers[t] = Worker{&pin,
                        int(t),
                        &backend,
                        plan.steps(t),
                        plan.step_count(t),
                        prm,
                        &results[t],
                        &go,
                        peak ? plan.peak_step() + 1 : UINT64_MAX,
                        sampler.get(),
                        &pager};
  }
  rusage ru0{}, ru1{};
  uint32_t started = 0;
  for (; started < nthreads; ++started) {
    const int err = start_thread(&tids[started], worker_main, &workers[started]);
    if (err != 0) {
      go.store(-1);
      go.notify_all();
      for (uint32_t t = 0; t < started; ++t) pthread_join(tids[t], nullptr);
      throw std::runtime_error("cannot start replay thread " + std::to_string(started) + " of " +
                               std::to_string(nthreads) + ": " + std::strerror(err));
    }
  }
  getrusage(RUSAGE_SELF, &ru0);
  const uint64_t start = monotonic_ns();
  for (uint32_t t = 0; t < nthreads; ++t) workers[t].params.start_ns = start;
  pager.start();
  if (sampler) sampler->start(start);
  go.store(1, std::memory_order_release);
  go.notify_all();
  // Each replay thread's last thread (the first, unless it ran recorded
  // threads one after another: each thread joined the one before).
  for (uint32_t t = 0; t < nthreads; ++t) {
    std::atomic_ref<uint32_t> done(workers[t].done);
    while (done.load(std::memory_order_acquire) == 0) done.wait(0, std::memory_order_acquire);
    pthread_join(workers[t].last, nullptr);
  }
  if (sampler) sampler->stop();
  pager.stop();
  uint64_t end = start;
  for (uint32_t t = 0; t < nthreads; ++t) end = std::max(end, results[t].end_ns);
  getrusage(RUSAGE_SELF, &ru1);

  // The replay is over: from here on heaplab may allocate.
  if (args.table_fd >= 0) {
    const char* p = reinterpret_cast<const char*>(table);
    for (size_t off = 0; off < table_bytes;) {
      const ssize_t n = write(args.table_fd, p + off, table_bytes - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(std::string("writing the object table: ") + std::strerror(errno));
      off += size_t(n);
    }
  }
  ThreadResult total;
  nlohmann::json per_thread = nlohmann::json::array();
  for (uint32_t t = 0; t < nthreads; ++t) {
    const ThreadResult& r = results[t];
    uint64_t calls = 0;
    for (unsigned op = 0; op < trace::kOpCount; ++op) {
      total.calls[op] += r.calls[op];
      total.nulls[op] += r.nulls[op];
      total.unexpected[op] += r.unexpected[op];
      calls += r.calls[op];
    }
    for (unsigned m = 0; m < kMemorySteps; ++m) total.memory[m] += r.memory[m];
    total.memory_failed += r.memory_failed;
    total.waits += r.waits;
    total.wait_ns += r.wait_ns;
    total.handoffs += r.handoffs;
    total.handoff_waits += r.handoff_waits;
    total.handoff_wait_ns += r.handoff_wait_ns;
    total.threads_started += r.threads_started;
    total.threads_not_started += r.threads_not_started;
    total.unrepresentable += r.unrepresentable;
    total.plan_waits += r.plan_waits;
    total.plan_wait_ns += r.plan_wait_ns;
    total.moved_failed_reallocs += r.moved_failed_reallocs;
    per_thread.push_back({{"calls", calls},
                          {"wall_ns", r.end_ns - r.start_ns},
                          {"waits", r.waits},
                          {"wait_ns", r.wait_ns},
                          {"cpu", r.cpu}});
  }
  const double wall_s = double(end - start) / 1e9;
  nlohmann::json ops = nlohmann::json::object();
  uint64_t calls = 0;
  bool calls_match = true, results_match = total.moved_failed_reallocs == 0;
  for (unsigned op = 0; op < trace::kOpCount; ++op) {
    if (total.calls[op] != plan.expected_ops()[op]) calls_match = false;
    if (total.nulls[op] != 0 || total.unexpected[op] != 0) results_match = false;
    if (total.calls[op] == 0 && plan.expected_ops()[op] == 0) continue;
    calls += total.calls[op];
    ops[std::string(trace::op_name(static_cast<trace::Op>(op)))] = {
        {"calls", total.calls[op]},
        {"expected", plan.expected_ops()[op]},
        {"null_results", total.nulls[op]},
        {"unexpected_results", total.unexpected[op]},
        {"per_s", wall_s > 0 ? double(total.calls[op]) / wall_s : 0.0}};
  }
  // The program's own memory calls (format 1.1): made with real system
  // calls, outside the allocator; they count in calls_match too.
  nlohmann::json memory_calls = nlohmann::json::object();
  for (unsigned m = 0; m < kMemorySteps; ++m) {
    if (total.memory[m] != plan.expected_memory_ops()[m]) calls_match = false;
    if (total.memory[m] == 0 && plan.expected_memory_ops()[m] == 0) continue;
    memory_calls[memory_step_name(kStepMap + m)] = {{"calls", total.memory[m]},
                                                    {"expected", plan.expected_memory_ops()[m]}};
  }
  nlohmann::json j;
  j["backend"] = backend.name;
  j["load"] = args.load;
  j["allocator"] = backend.describe();
  j["replay_threads"] = nthreads;
  j["touch"] = touch_name(args.settings.touch);
  j["timing"] = paced ? "recorded" : "fast";
  if (paced) j["speed"] = args.settings.speed;
  j["wall_s"] = wall_s;
  j["cpu"] = {{"user_s", seconds(ru1.ru_utime) - seconds(ru0.ru_utime)},
              {"system_s", seconds(ru1.ru_stime) - seconds(ru0.ru_stime)}};
  // Each first touch of an anonymous page is a fault: with touch=pages or
  // all, minor faults count the pages the replay made resident (again after
  // the allocator gave them back).
  j["page_faults"] = {{"minor", ru1.ru_minflt - ru0.ru_minflt}, {"major", ru1.ru_majflt - ru0.ru_majflt}};
  // The replayer's own peak (VmHWM): getrusage's also counts what the
  // process held before it exec'd the replayer (heaplab's pages, shared
  // after its fork), which has nothing to do with the replay.
  j["max_rss_kib"] = own_peak_rss_kib(ru1.ru_maxrss);
  j["calls"] = calls;
  j["calls_per_s"] = wall_s > 0 ? double(calls) / wall_s : 0.0;
  j["ops"] = ops;
  if (!memory_calls.empty()) {
    j["memory_calls"] = memory_calls;
    j["memory_calls_failed"] = total.memory_failed;
  }
  // calls_match: every recorded call was made, exactly; results_match: and
  // each returned what it returned in the trace (a result or NULL).
  j["calls_match"] = calls_match;
  j["results_match"] = results_match;
  j["faithful"] = calls_match && results_match;
  j["cross_thread_waits"] = {{"count", total.waits}, {"total_ns", total.wait_ns}};
  // Table slots passed between threads (replay/plan.h, kStepHandoff): how
  // often that made a thread wait.
  j["slot_handoffs"] = {
      {"count", total.handoffs}, {"waited", total.handoff_waits}, {"total_ns", total.handoff_wait_ns}};
  // Recorded threads that started after others had ended, each on a
  // thread of its own (plan.h, kStepNewThread); where none could start,
  // the one before went on.
  j["threads_started"] = {{"count", total.threads_started}, {"not_started", total.threads_not_started}};
  if (total.unrepresentable) j["results_beyond_2^48"] = total.unrepresentable;
  j["moved_failed_reallocs"] = total.moved_failed_reallocs;
  j["threads"] = per_thread;
  // The replayer's own memory: the plan's windows mapped at most at once
  // (of the whole plan), the object table (its slots follow the live
  // objects), results, thread table and histograms.
  const uint64_t other_bookkeeping = bookkeeping - pages(table_bytes);
  j["bookkeeping_bytes"] = {{"plan", pager.resident_peak_bytes()},
                            {"plan_most", pager.resident_most_bytes()},
                            {"plan_total", plan.stored_bytes()},
                            {"object_table", table_bytes},
                            {"other", other_bookkeeping},
                            {"total", pager.resident_peak_bytes() + pages(table_bytes) + other_bookkeeping}};
  j["plan_windows"] = {{"steps_per_window", pager.window()},
                       {"mapped", pager.windows_mapped()},
                       {"waits", total.plan_waits},
                       {"wait_ns", total.plan_wait_ns}};
  if (hists) {
    // (--latency-of program times the calls the program timed, whatever --latency says.)
    j["latency"] = latency_json(hists, nthreads, timer, args.settings.latency_program ? 0 : args.settings.latency);
    if (args.settings.latency_program) j["latency"]["calls"] = "program";
  }
  if (sampler) j["memory"] = sampler->to_json();
  j["allocator_stats"] = backend.stats();
  j["environment"] = environment_json();
  j["pinning"] = pin.to_json();
  if (!plan_info.is_null()) j["plan"] = plan_info;

  const std::string out = j.dump(2) + "\n";
  for (size_t off = 0; off < out.size();) {
    const ssize_t n = write(args.result_fd, out.data() + off, out.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("writing the result: ") + std::strerror(errno));
    off += size_t(n);
  }
  munmap(table, table_bytes);
  if (hists) munmap(hists, std::max<size_t>(1, hist_bytes));
  return calls_match ? 0 : 3;
}

namespace {

// In preload mode the replayer's own memory (its arguments, its result,
// the C++ runtime's exception objects) comes from the allocator it
// replays. One that returns NULL there (for every request, or for those
// of the replayer's own sizes) is named, in one line and without
// allocating, instead of a std::bad_alloc, or a std::terminate where
// not even an exception could be made.
constexpr char kOwnMemoryRefused[] =
    "malloc returned NULL for the replayer's own memory (with --load preload the replayer runs on the allocator "
    "it replays: the trace's NULL results are counted, but the replayer cannot run without memory of its own; "
    "--load direct keeps its memory apart)";
int g_result_fd = 1;

void report_own_memory_refused() {
  char buf[sizeof kOwnMemoryRefused + 32];
  size_t n = 0;
  const auto put = [&](const char* t) {
    for (; *t && n < sizeof buf; ++t) buf[n++] = *t;
  };
  if (g_result_fd != 1) {
    put("{\"error\": \"");
    put(kOwnMemoryRefused);
    put("\"}\n");
  } else {
    put("heaplab-replay: ");
    put(kOwnMemoryRefused);
    put("\n");
  }
  const int fd = g_result_fd != 1 ? g_result_fd : 2;
  for (size_t off = 0; off < n;) {
    const ssize_t w = write(fd, buf + off, n - off);
    if (w <= 0) break;
    off += size_t(w);
  }
}

std::terminate_handler g_previous_terminate = nullptr;

// A terminate without an exception, where malloc refuses a small block:
// the runtime could not allocate the exception being thrown.
[[noreturn]] void on_terminate() {
  void* probe = std::malloc(64);
  if (probe == nullptr) {
    report_own_memory_refused();
    _exit(1);
  }
  std::free(probe);
  if (g_previous_terminate) g_previous_terminate();
  std::abort();
}

}  // namespace

int replayer_main(int argc, char** argv, const BackendHooks& backend, SelectFn select) {
  const char* prog = argc > 0 ? argv[0] : "heaplab-replay";
  if (const char* slash = std::strrchr(prog, '/')) prog = slash + 1;
  int result_fd = 1;
  g_previous_terminate = std::set_terminate(on_terminate);
  // The result's descriptor, found before anything allocates (reading the
  // arguments does): where a refusal of the replayer's own memory is said.
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--result-fd") == 0) {
      char* end = nullptr;
      const long fd = std::strtol(argv[i + 1], &end, 10);
      if (end && *end == 0 && fd > 2 && fd < 1 << 20) g_result_fd = int(fd);
    }
  try {
    const ReplayerArgs args = parse_replayer_args(argc, argv);
    result_fd = args.result_fd;
    g_result_fd = result_fd;
    return run_replayer(args, select ? select(args) : backend);
  } catch (const std::bad_alloc&) {
    report_own_memory_refused();
    return 1;
  } catch (const std::exception& e) {
    // Bad input (arguments, the plan or trace, a library that cannot be
    // loaded) exits 2; a failure while running (memory, threads) exits 1.
    const bool input = dynamic_cast<const std::invalid_argument*>(&e) || dynamic_cast<const PlanError*>(&e) ||
                       dynamic_cast<const trace::TraceError*>(&e);
    const int code = input ? 2 : 1;
    report_error(result_fd, prog, e.what());
    return code;
  }
}

}  // namespace heaplab::replay
