// The software method: the shim writes each thread's events into per-process
// raw files (DIR/PID.GEN.hlraw), which are normalised into a trace each:
// while the program runs (a thread per process image, the raw blocks given
// back as they are consumed), or, with --normalise after, in parallel once
// the program has exited.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "capture/launch/method.h"
#include "capture/normalise/raw_live.h"
#include "capture/normalise/raw_reader.h"
#include "capture/shim/raw_format.h"
#include "common/files.h"

namespace heaplab::launch {
namespace {

void nap_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, nullptr);
}

// Whether a task's /proc stat file says it has exited: 1 yes, 0 no, -1
// cannot tell (not a "no such process").
int task_exited(const std::string& stat_path) {
  int fd = ::open(stat_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? 1 : -1;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  const int err = errno;
  ::close(fd);
  if (n < 0) return err == ESRCH ? 1 : -1;
  if (n == 0) return 1;
  buf[n] = 0;
  const char* paren = std::strrchr(buf, ')');  // the name may hold anything, ')' included
  if (!paren || paren[1] != ' ') return -1;
  return paren[2] == 'Z' || paren[2] == 'X' ? 1 : 0;
}

// Whether process PID has exited: every thread of it gone or a zombie (its
// main thread alone may have called pthread_exit while others run on).
// Anything heaplab cannot tell (out of descriptors) counts as running.
bool process_gone(uint32_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  if (task_exited(dir + "/stat") != 1) return false;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir + "/task", ec);
  if (ec) return ec == std::errc::no_such_file_or_directory || ec == std::errc::no_such_process;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return false;
    if (task_exited(it->path().string() + "/stat") != 1) return false;
  }
  return !ec;
}

// A raw file the shim created but could not set up (its header never
// written: a full disk, a write error): the process ran uncaptured.
void check_started(const std::string& path) {
  char magic[sizeof raw::kFileMagic] = {};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // RawFile says why
  const ssize_t n = ::pread(fd, magic, sizeof magic, 0);
  ::close(fd);
  if (n != ssize_t(sizeof magic) || std::memcmp(magic, raw::kFileMagic, sizeof magic) != 0)
    throw std::runtime_error(path +
                             ": capture never started in this process (the shim could not set up its raw file: "
                             "a full disk? its message is above)");
}

// Which process image a trace is of (the result of normalise_to or normalise_live).
void name_trace(TraceResult& tr, const RawName& name, const normalise::RecordSource& raw) {
  tr.pid = name.pid;
  tr.exec_generation = name.gen;
  tr.command_line = raw.command_line();
  const raw::FileHeader& h = raw.header();
  tr.exe.assign(h.exe, std::min<size_t>(h.exe_len, sizeof h.exe));
}

// The order of process images: root first, then by pid and image.
bool root_first(uint32_t pa, uint32_t ga, uint32_t pb, uint32_t gb, pid_t root) {
  const bool ra = pa == uint32_t(root) && ga == 0, rb = pb == uint32_t(root) && gb == 0;
  if (ra != rb) return ra;
  return std::tie(pa, ga) < std::tie(pb, gb);
}

void sort_raws(std::vector<RawName>& raws, pid_t root) {
  std::sort(raws.begin(), raws.end(),
            [&](const RawName& a, const RawName& b) { return root_first(a.pid, a.gen, b.pid, b.gen, root); });
}

// ns per tick from the program's start to now (0 if unknown), for an image
// too short-lived to measure its own.
double ns_per_tick_since(const ClockPair& c0) {
  const ClockPair c1 = clock_pair();
  return c1.ticks > c0.ticks ? double(c1.mono - c0.mono) / double(c1.ticks - c0.ticks) : 0;
}

// Normalises every process image's raw file while the program runs: a
// watcher looks for new raw files every 10 ms and starts a thread for each,
// which normalises it live (normalise::normalise_live) until its image has
// ended: when the next image of the same process appears (exec), when the
// process has exited, or, for the program itself, when heaplab has waited
// for it. Then the metadata known only at the end is added and the trace
// is renamed into place.
class LiveCollector {
 public:
  LiveCollector(const CaptureOptions& opt, const RunInfo& run) : opt_(opt), run_(run) {
    watcher_ = std::thread([this] { watch(); });
  }
  ~LiveCollector() {
    stop_watcher();
    for (auto& j : jobs_) end(*j, nlohmann::json::object());
    for (auto& j : jobs_)
      if (j->thread.joinable()) j->thread.join();
  }

  // After the program (and followed descendants) exited: the rest of every
  // raw file, the results into res in root-first order.
  void finish(const CaptureOptions& opt, CaptureResult& res) {
    stop_watcher();
    add_new();  // files that appeared after the last look
    for (auto& j : jobs_) end(*j, capture_metadata(opt, res, j->root, nlohmann::json::object()));
    for (auto& j : jobs_)
      if (j->thread.joinable()) j->thread.join();
    for (auto& j : jobs_)
      if (!j->live_failed.empty()) run(*j);  // ended: normalised as with --normalise after
    std::vector<RawName> raws;
    for (auto& j : jobs_) raws.push_back(j->name);
    sort_raws(raws, run_.pid);
    for (const RawName& r : raws) {
      for (auto& j : jobs_) {
        if (j->name.path != r.path) continue;
        if (j->result) res.traces.push_back(std::move(*j->result));
        if (!j->error.empty()) res.failed.push_back(j->error);
        if (!j->note.empty()) res.notes.push_back(j->note);
      }
    }
  }

 private:
  struct Job {
    RawName name;
    bool root = false;
    std::atomic<bool> ended{false};
    nlohmann::json meta;  // written before `ended`
    std::optional<TraceResult> result;
    std::string error, note;
    std::string live_failed;  // why it had no thread of its own
    bool released = false;    // its shim told not to wait for a reader (normalise::release_waiting_shim)
    std::thread thread;
  };

  void end(Job& j, nlohmann::json meta) {
    if (j.ended.load(std::memory_order_acquire)) return;
    j.meta = std::move(meta);
    j.ended.store(true, std::memory_order_release);
  }

  void stop_watcher() {
    stop_.store(true);
    if (watcher_.joinable()) watcher_.join();
  }

  void watch() {
    while (!stop_.load()) {
      try {
        look();
      } catch (const std::exception&) {
        // (A thread that cannot be started is reported by its job; anything
        // else is tried again in 10 ms.)
      }
      nap_ms(10);
    }
  }

  void look() {
    add_new();
    for (auto& j : jobs_) {
      // No reader for it: its shim is released once its header is there
      // (found before the shim wrote it, the first try did nothing).
      if (!j->live_failed.empty() && !j->released) j->released = normalise::release_waiting_shim(j->name.path);
      if (j->root || j->ended.load(std::memory_order_acquire)) continue;
      std::error_code ec;
      const std::string next_image =
          opt_.raw_dir + "/" + std::to_string(j->name.pid) + "." + std::to_string(j->name.gen + 1) + ".hlraw";
      if (std::filesystem::exists(next_image, ec) || process_gone(j->name.pid)) {
        CaptureResult none;
        end(*j, capture_metadata(opt_, none, false, nlohmann::json::object()));
      }
    }
  }

  void add_new() {
    std::vector<RawName> raws;
    try {
      raws = list_raw(opt_.raw_dir);
    } catch (const std::exception&) {
      return;  // the directory is being removed: nothing new
    }
    for (const RawName& r : raws) {
      if (!known_.insert(r.path).second) continue;
      auto j = std::make_unique<Job>();
      j->name = r;
      j->root = r.pid == uint32_t(run_.pid) && r.gen == 0;
      Job* job = j.get();
      jobs_.push_back(std::move(j));
      try {
        job->thread = std::thread([this, job] { run(*job); });
      } catch (const std::system_error& e) {
        // No thread for it: normalised after the program exits (finish()),
        // and its shim not held back waiting for a reader.
        job->live_failed = e.what();
        job->released = normalise::release_waiting_shim(r.path);
      }
    }
  }

  void run(Job& j) {
    std::string out = trace_name(opt_.output, j.name.pid, j.name.gen, j.root);
    auto ended = [&] { return j.ended.load(std::memory_order_acquire); };
    uint64_t consumed = 0;
    try {
      // The shim writes the header's magic last: wait for a valid header.
      std::unique_ptr<normalise::LiveRawFile> raw;
      const auto trying_since = std::chrono::steady_clock::now();
      bool released = false;
      while (!raw && !ended()) {
        try {
          raw = std::make_unique<normalise::LiveRawFile>(j.name.path, !opt_.keep_raw);
        } catch (const normalise::RawError&) {
          // A valid header that will not open (no descriptor to be had, a
          // reader this build refuses) for a second: the shim goes on
          // without waiting for this reader (raw::kLivePreReaderBlocks).
          if (!released && std::chrono::steady_clock::now() - trying_since > std::chrono::seconds(1))
            released = normalise::release_waiting_shim(j.name.path);
          nap_ms(2);
        }
      }
      if (!raw) normalise::release_waiting_shim(j.name.path);  // (read after the fact, below)
      // Timestamps need the TSC's rate, measured over the first 20 ms.
      while (raw && raw->ns_per_tick() == 0 && !ended()) {
        raw->beat();
        nap_ms(1);
      }
      if (!raw || raw->ns_per_tick() == 0) {
        // Ended before it could start: after the fact, as with --normalise after.
        raw.reset();
        check_started(j.name.path);
        normalise::RawFile file(j.name.path);
        out = trace_name(opt_.output, j.name.pid, j.name.gen, j.root, file.command_line());
        CaptureOptions o = opt_;
        o.normalise.fallback_ns_per_tick = ns_per_tick_since(run_.start);
        // (j.meta holds the capture's metadata already: nothing for normalise_to to add from a result.)
        TraceResult tr = normalise_to(file, out, o, CaptureResult{}, false, j.meta);
        name_trace(tr, j.name, file);
        j.result = std::move(tr);
        return;
      }
      out = trace_name(opt_.output, j.name.pid, j.name.gen, j.root, raw->command_line());
      normalise::NormaliseOptions nopt = opt_.normalise;
      TraceResult tr;
      try {
        common::write_then_rename(out, [&](const std::string& tmp) {
          tr.report = normalise::normalise_live(*raw, tmp, nopt, ended, [&] {
            nlohmann::json m = j.meta;
            label_allocator(m, opt_, raw->header());
            return m;
          });
        });
      } catch (...) {
        consumed = raw->blocks_consumed();
        throw;
      }
      tr.path = out;
      name_trace(tr, j.name, *raw);
      if (!raw->punch_error().empty())
        j.note = j.name.path + ".blocks: consumed blocks could not be deleted (" + raw->punch_error() +
                 "): scratch disk was not bounded";
      j.result = std::move(tr);
    } catch (const std::exception& e) {
      normalise::release_waiting_shim(j.name.path);  // (whatever stopped this reader: no shim waits for it)
      j.error = e.what();
      if (consumed > 0)
        j.error += " (" + std::to_string(consumed) +
                   " raw blocks were already normalised and deleted: the raw files left hold only the rest)";
    }
  }

  const CaptureOptions& opt_;
  RunInfo run_;
  std::atomic<bool> stop_{false};
  std::set<std::string> known_;             // raw files that have a job
  std::vector<std::unique_ptr<Job>> jobs_;  // touched by the watcher, then (after it stopped) by finish()
  std::thread watcher_;
};

// The spare header slots (raw_format.h, SpareControl) every captured
// process gets, for when its raw file cannot be set up: a memfd, so that a
// disk full before the start still leaves room to count the calls.
class SpareHeaders {
 public:
  SpareHeaders() {
    fd_ = memfd_create("heaplab-spare-headers", MFD_CLOEXEC);
    if (fd_ < 0) return;
    raw::SpareControl ctl{};
    std::memcpy(ctl.magic, raw::kSpareMagic, sizeof ctl.magic);
    ctl.slots = raw::kSpareSlots;
    if (ftruncate(fd_, off_t(raw::kSpareBytes)) != 0 || pwrite(fd_, &ctl, sizeof ctl, 0) != ssize_t(sizeof ctl)) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~SpareHeaders() {
    if (fd_ >= 0) ::close(fd_);
  }
  SpareHeaders(const SpareHeaders&) = delete;
  SpareHeaders& operator=(const SpareHeaders&) = delete;

  // Hands the memfd to the program: at descriptor 1000 (below the usual
  // 1024 limit, above what programs usually use; under a lower limit, 16
  // below it, leaving room for what spawn parks above its targets), kept
  // open across exec for the shim of every image. Without it (no memfd, a
  // limit below 32), an inherited HEAPLAB_CAPTURE_SPARE (a capture inside a
  // capture) is cleared, so that no shim claims another launcher's slots.
  void pass(process::Spec& spec) const {
    struct rlimit lim;
    const rlim_t limit = getrlimit(RLIMIT_NOFILE, &lim) != 0 ? 0 : lim.rlim_cur == RLIM_INFINITY ? 1016 : lim.rlim_cur;
    if (fd_ < 0 || limit < 32) {
      spec.env.emplace_back("HEAPLAB_CAPTURE_SPARE", std::nullopt);
      return;
    }
    const int child = int(std::min<rlim_t>(1000, limit - 16));
    spec.fds.emplace_back(child, fd_);
    spec.env.emplace_back("HEAPLAB_CAPTURE_SPARE", std::to_string(child));
  }

  // After the program (and followed descendants) exited: a trace for each
  // process image that took a slot, holding the `lost` event with the calls
  // it counted (normalised as a raw file without threads), into res in
  // root-first order.
  void collect(CaptureOptions& opt, CaptureResult& res, const RunInfo& run) const {
    if (fd_ < 0) return;
    void* m = mmap(nullptr, raw::kSpareBytes, PROT_READ, MAP_SHARED, fd_, 0);
    if (m == MAP_FAILED) {
      res.failed.push_back(std::string("cannot map the spare raw headers: ") + std::strerror(errno));
      return;
    }
    const auto* base = static_cast<const uint8_t*>(m);
    const auto* ctl = reinterpret_cast<const raw::SpareControl*>(base);
    const uint32_t claimed = __atomic_load_n(&ctl->claimed, __ATOMIC_ACQUIRE);
    res.unnoted_execs = __atomic_load_n(&ctl->unnoted_exec, __ATOMIC_ACQUIRE);
    res.unnoted_forks = __atomic_load_n(&ctl->unnoted_fork, __ATOMIC_ACQUIRE);
    if (claimed > raw::kSpareSlots)
      res.failed.push_back(fmt::format(
          "{} more processes could not set up their raw files once the {} spare headers were taken: their calls "
          "were neither recorded nor counted (their messages are above)",
          claimed - raw::kSpareSlots, raw::kSpareSlots));
    if (claimed > 0 && opt.normalise.fallback_ns_per_tick == 0)
      opt.normalise.fallback_ns_per_tick = ns_per_tick_since(run.start);
    std::set<std::pair<uint32_t, uint32_t>> taken;  // (pid, exec generation) with a trace
    for (const TraceResult& t : res.traces) taken.insert({t.pid, t.exec_generation});
    for (uint32_t i = 0; i < std::min(claimed, raw::kSpareSlots); ++i) {
      const uint8_t* slot = base + raw::kBlockSize * (i + 1);
      const auto* h = reinterpret_cast<const raw::FileHeader*>(slot);
      if (std::memcmp(h->magic, raw::kFileMagic, sizeof h->magic) != 0) {
        res.failed.push_back(fmt::format(
            "spare raw header {}: claimed by a process that never wrote it (killed while starting?): its calls were "
            "not counted",
            i));
        continue;
      }
      RawName name;
      name.pid = h->pid;
      name.gen = h->exec_generation;
      while (!taken.insert({name.pid, name.gen}).second) ++name.gen;  // (no file found a generation)
      name.path = opt.raw_dir + "/" + std::to_string(name.pid) + "." + std::to_string(name.gen) + ".hlraw";
      const bool root = name.pid == uint32_t(run.pid) && name.gen == 0;
      // (The shim leaves its empty raw file, so that an exec'd image still
      // tells it was not the first: that file never started; this is why.)
      const std::string never = name.path + ": capture never started in this process";
      std::erase_if(res.failed, [&](const std::string& f) { return f.rfind(never, 0) == 0; });
      try {
        normalise::RawFile file(name.path + " (its header, kept in memory: the raw file could not be set up)", slot);
        const std::string out = trace_name(opt.output, name.pid, name.gen, root, file.command_line());
        TraceResult tr = normalise_to(file, out, opt, res, root, nlohmann::json::object());
        name_trace(tr, name, file);
        res.traces.push_back(std::move(tr));
      } catch (const std::exception& e) {
        res.failed.push_back(e.what());
      }
    }
    munmap(m, raw::kSpareBytes);
    std::stable_sort(res.traces.begin(), res.traces.end(), [&](const TraceResult& a, const TraceResult& b) {
      return root_first(a.pid, a.exec_generation, b.pid, b.exec_generation, run.pid);
    });
  }

 private:
  int fd_ = -1;
};

class SoftwareMethod : public CaptureMethod {
 public:
  const char* name() const override { return "software"; }

  void command(const CaptureOptions& opt, CaptureResult&, const std::string& preload,
               process::Spec& spec) const override {
    spec.env.emplace_back("LD_PRELOAD", preload);
    // A reader that consumes is coming (sink.h); else none: unset, not
    // inherited from an outer capture or the user's environment.
    if (opt.live && !opt.keep_raw)
      spec.env.emplace_back("HEAPLAB_CAPTURE_LIVE", "1");
    else
      spec.env.emplace_back("HEAPLAB_CAPTURE_LIVE", std::nullopt);
    spec.env_own_pid = "HEAPLAB_CAPTURE_ROOT";  // the shim knows the program's own process by it
    spec.argv = opt.argv;
    spec.shell_fallback = true;  // (a script without a #! line: /bin/sh runs it, as a shell would)
    spare_.pass(spec);
  }

  void started(const CaptureOptions& opt, const RunInfo& run) override {
    if (opt.live) live_ = std::make_unique<LiveCollector>(opt, run);
  }

  void collect(CaptureOptions& opt, CaptureResult& res, const RunInfo& run) const override {
    if (live_) {
      auto t1 = std::chrono::steady_clock::now();
      live_->finish(opt, res);
      spare_.collect(opt, res, run);
      res.normalise_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      return;
    }
    // A TSC rate for processes too short-lived to calibrate on their own.
    auto elapsed = std::chrono::steady_clock::now() - run.t0;
    if (elapsed < std::chrono::milliseconds(20)) std::this_thread::sleep_for(std::chrono::milliseconds(20) - elapsed);
    opt.normalise.fallback_ns_per_tick = ns_per_tick_since(run.start);

    auto t1 = std::chrono::steady_clock::now();
    std::vector<RawName> raws = list_raw(opt.raw_dir);
    sort_raws(raws, run.pid);
    // One trace per raw file, normalised in parallel (a `make -j` capture has
    // many), results kept in the sorted order.
    std::vector<std::optional<TraceResult>> done(raws.size());
    std::vector<std::string> errors(raws.size());
    auto normalise_one = [&](size_t i) {
      const RawName& r = raws[i];
      bool root = r.pid == uint32_t(run.pid) && r.gen == 0;
      std::string out;
      try {
        check_started(r.path);
        normalise::RawFile raw(r.path);
        out = trace_name(opt.output, r.pid, r.gen, root, raw.command_line());
        TraceResult tr = normalise_to(raw, out, opt, res, root, nlohmann::json::object());
        name_trace(tr, r, raw);
        done[i] = std::move(tr);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    };
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i; (i = next.fetch_add(1)) < raws.size();) normalise_one(i);
    };
    size_t nthreads = std::min<size_t>(raws.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
    for (size_t i = 0; i < raws.size(); ++i) {
      if (done[i]) res.traces.push_back(std::move(*done[i]));
      if (!errors[i].empty()) res.failed.push_back(errors[i]);
    }
    spare_.collect(opt, res, run);
    res.normalise_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }

 private:
  mutable std::unique_ptr<LiveCollector> live_;
  SpareHeaders spare_;
};

}  // namespace

std::unique_ptr<CaptureMethod> software_method() { return std::make_unique<SoftwareMethod>(); }

}  // namespace heaplab::launch
