#include "replay/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__) && defined(HEAPLAB_XXH_DISPATCH)
// XXH3 on AVX2 where the CPU has it (chosen at run time; the same hashes):
// twice SSE2's speed here. (CMakeLists.txt: where the library has it.)
#include <xxh_x86dispatch.h>
#endif

#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <fmt/format.h>

#include "allocators/library.h"
#include "capture/format/trace_reader.h"
#include "common/files.h"
#include "capture/format/memory_available.h"
#include "common/process.h"
#include "common/capture_meta.h"
#include "common/text.h"
#include "replay/engine.h"
#include "replay/histogram.h"
#include "replay/plan.h"
#include "replay/plan_store.h"
#include "replay/result.h"
#include "common/json.h"

extern char** environ;

namespace heaplab::replay {

namespace fs = std::filesystem;
using common::group_digits;
using common::self_dir;

double default_timeout_s(uint64_t calls, uint64_t bytes_requested, double paced_duration_s) {
  return 120.0 + double(calls) * 2e-6 + double(bytes_requested) / double(uint64_t{1} << 30) * 4.0 +
         2.0 * paced_duration_s;
}

namespace {

// A number of seconds as a limit is written: whole from 10 s on, else to
// three significant digits (--timeout 0.5 is "0.5 s", not "0 s").
std::string seconds_text(double s) { return s >= 10 ? fmt::format("{:.0f}", s) : fmt::format("{:.3g}", s); }

std::string replayer_dir(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("HEAPLAB_REPLAYER_DIR"); env && *env) return env;
  return self_dir();
}

const allocators::KnownAllocator* known(const std::string& name) {
  for (const auto& k : allocators::known_allocators())
    if (k.name == name || (name == "system" && k.name == "glibc")) return &k;
  return nullptr;
}

bool is_executable(const std::string& p) { return access(p.c_str(), X_OK) == 0; }

// Settings an allocator reads from the environment.
bool allocator_setting(const std::string& k) {
  return k.rfind("MALLOC_", 0) == 0 || k.rfind("MIMALLOC_", 0) == 0 || k.rfind("TCMALLOC_", 0) == 0 ||
         k.rfind("JEMALLOC_", 0) == 0 || k == "GLIBC_TUNABLES" || k == "_RJEM_MALLOC_CONF";
}

// Settings an allocator reads from the environment: heaplab's own and the
// replay's extra ones (which win).
nlohmann::json allocator_settings(const std::vector<std::pair<std::string, std::string>>& extra) {
  nlohmann::json s = nlohmann::json::object();
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    if (allocator_setting(k)) s[k] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra)
    if (allocator_setting(k)) s[k] = v;
  return s;
}

struct Launch {
  std::string exe;
  std::vector<std::string> args;
  std::string preload;  // LD_PRELOAD value, "" = none
  std::string library;  // allocator library path ("" = glibc)
};

Launch resolve(const ReplayOptions& opt) {
  Launch l;
  const std::string dir = replayer_dir(opt.replayer_dir);
  const auto* k = known(opt.allocator);
  const bool is_path = !k && opt.allocator.find('/') != std::string::npos;
  if (opt.load != "preload" && opt.load != "direct")
    throw ReplayError("--load: expected preload or direct, not '" + opt.load + "'");
  if (opt.load == "preload" || (k && k->name == "glibc")) {
    std::string err;
    auto lib = allocators::resolve_allocator(opt.allocator, err);
    if (!lib && k) throw NotAvailable(err);  // a known allocator that is not installed
    if (!lib) throw ReplayError(err);
    l.exe = dir + "/heaplab-replay";
    l.preload = lib->path;
    l.library = lib->path;
  } else if (k) {
    l.exe = dir + "/" + k->replayer;
    if (!is_executable(l.exe))
      throw NotAvailable("allocator '" + k->name + "': direct load is not available: " + k->replayer +
                         " was not built (install " + k->dev_package + " and rebuild heaplab)");
  } else if (is_path) {
    if (access(opt.allocator.c_str(), R_OK) != 0)
      throw ReplayError("allocator '" + opt.allocator + "': " + std::strerror(errno));
    l.exe = dir + "/heaplab-replay";
    l.args = {"--direct-library", fs::absolute(opt.allocator).string()};
    l.library = fs::absolute(opt.allocator).string();
  } else {
    std::string err;
    allocators::resolve_allocator(opt.allocator, err);  // for its "unknown name" message
    throw ReplayError(err);
  }
  if (!is_executable(l.exe))
    throw ReplayError("replayer '" + l.exe + "' not found (build heaplab, or set HEAPLAB_REPLAYER_DIR)");
  return l;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// The last plan built in this process, kept for the next replay of the same
// trace with the same plan options (`--allocator all`, `--load both`, an
// experiment's repetitions): built once, not once per allocator. One entry:
// a new trace replaces it. The replayers map it read-only.
struct PlanCache {
  std::string key, trace_id;
  int fd = -1;
  PlanSummary summary;
  void keep(const std::string& k, int plan_fd, const PlanSummary& s, std::string id) {
    if (fd >= 0) close(fd);
    fd = k.empty() ? -1 : fcntl(plan_fd, F_DUPFD_CLOEXEC, 0);
    key = fd >= 0 ? k : "";
    summary = s;
    trace_id = std::move(id);
  }
};

PlanCache& plan_cache() {
  static PlanCache c;
  return c;
}

// The trace file as it is now (device, inode, size, modification time) and
// the plan options; "" if it cannot be read.
std::string plan_key(const std::string& trace, const PlanOptions& o) {
  struct stat st {};
  if (stat(trace.c_str(), &st) != 0) return "";
  return fmt::format("{}:{}:{}:{}.{}:{}:{}:{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                     o.threads, o.times, o.live);
}

// Tasks (threads) whose real user is `uid`, from /proc/PID/status: what
// ulimit -u (RLIMIT_NPROC) counts, across all of the user's processes.
uint64_t user_tasks(uid_t uid) {
  uint64_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(it->path() / "status");
    std::string line;
    bool mine = false;
    uint64_t threads = 0;
    while (std::getline(in, line)) {
      if (line.rfind("Uid:", 0) == 0) mine = std::strtoul(line.c_str() + 4, nullptr, 10) == uid;
      if (line.rfind("Threads:", 0) == 0) threads = std::strtoull(line.c_str() + 8, nullptr, 10);
    }
    if (mine) n += threads;
  }
  return n;
}

// Tasks a replayer runs besides its replay threads: its main thread, the
// plan pager and the memory sampler (replayer.cpp, plan_pager.cpp,
// sampler.cpp).
constexpr uint64_t kReplayerHelperTasks = 3;

// About how many threads one process may start here: each takes a task
// (kernel.threads-max and kernel.pid_max, less the tasks that run now; the
// cgroup's pids.max; ulimit -u, less the user's tasks) and two mappings, its stack and guard page
// (vm.max_map_count, the limit a replay of 32,448 threads met), less what
// the replayer maps itself. UINT64_MAX if unknown.
uint64_t thread_limit() {
  const auto read_u64 = [](const std::string& path) -> uint64_t {
    std::ifstream in(path);
    uint64_t v = 0;
    return in >> v ? v : 0;
  };
  uint64_t limit = UINT64_MAX;
  if (const uint64_t m = read_u64("/proc/sys/vm/max_map_count"); m > 2048) limit = std::min(limit, (m - 1024) / 2);
  // Tasks running now: /proc/loadavg's "running/total".
  uint64_t tasks = 0;
  if (std::ifstream la("/proc/loadavg"); la) {
    std::string a, b, c, rt;
    if (la >> a >> b >> c >> rt && rt.find('/') != std::string::npos)
      tasks = std::strtoull(rt.c_str() + rt.find('/') + 1, nullptr, 10);
  }
  for (const char* path : {"/proc/sys/kernel/threads-max", "/proc/sys/kernel/pid_max"})
    if (const uint64_t t = read_u64(path); t != 0) limit = std::min(limit, t > tasks ? t - tasks : 0);
  // cgroup v2: this process's group's pids.max ("max": none), less its pids.current.
  if (std::ifstream cg("/proc/self/cgroup"); cg) {
    std::string line;
    while (std::getline(cg, line))
      if (line.rfind("0::", 0) == 0) {
        const std::string dir = "/sys/fs/cgroup" + line.substr(3);
        const uint64_t max = read_u64(dir + "/pids.max"), current = read_u64(dir + "/pids.current");
        if (max != 0) limit = std::min(limit, max > current ? max - current : 0);
      }
  }
  struct rlimit rl {};
  if (getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && getuid() != 0) {
    // (and the replayer's own: its main thread, plan pager and sampler)
    const uint64_t used = user_tasks(getuid()) + kReplayerHelperTasks;
    limit = std::min<uint64_t>(limit, rl.rlim_cur > used ? rl.rlim_cur - used : 0);
  }
  return limit;
}

// What the replay will surely need in memory, against what the machine
// has: the replayer's object table and plan windows, and the part of the
// trace's live heap at its peak that the replay writes (all of it with
// --touch pages, all or recorded, which writes at least the recorded
// pages; a page an object with --touch first; nothing with none). The
// program's own mappings are left out: they are made with MAP_NORESERVE
// and only their recorded pages are written. "" if it fits.
std::string memory_check(const PlanSummary& plan, const ReplaySettings& settings) {
  const uint64_t available = trace::memory_available();
  if (available == 0) return "";
  const uint64_t table = (plan.slots + 1) * 8;
  // Per replay thread: the pager's smallest windows (4 of 512 steps, past
  // its budget with many threads) and, when calls are timed, a latency
  // histogram per op (replayer.cpp).
  const uint64_t threads = std::max<uint32_t>(1, plan.replay_threads);
  const uint64_t step_bytes = sizeof(PlanStep) + (plan.has_times ? 8 : 0) + (plan.has_live ? 8 : 0);
  const uint64_t windows = std::max<uint64_t>(kPlanWindowBudget, threads * 4 * 512 * step_bytes);
  const uint64_t histograms =
      settings.latency || settings.latency_program ? threads * trace::kOpCount * sizeof(LogLinearHistogram) : 0;
  uint64_t heap = 0;
  if (settings.touch == Touch::first)
    heap = std::min<uint64_t>(plan.live_bytes_peak, plan.slots * uint64_t{4096});
  else if (settings.touch == Touch::pages || settings.touch == Touch::all)
    heap = plan.live_bytes_peak;
  else if (settings.touch == Touch::recorded)
    heap = plan.recorded_touches ? 0 : plan.live_bytes_peak;  // (recorded counts: only those pages)
  const uint64_t per_thread = windows - kPlanWindowBudget + histograms;
  const uint64_t need = table + windows + histograms + heap;
  if (need <= available) return "";
  return fmt::format(
      "the replay needs {} of memory ({} for the trace's live heap at its peak, {} for the object table of {} "
      "slots{}) and this machine has {} available: replay on a machine with more memory{}{}",
      common::gib_text(need), common::gib_text(heap), common::gib_text(table), group_digits(plan.slots),
      fmt::format(", {} for the plan's windows{}", common::gib_text(windows),
                  histograms ? fmt::format(", {} for {} replay threads' latency histograms",
                                           common::gib_text(histograms), group_digits(threads))
                             : ""),
      common::gib_text(available),
      heap > table && heap > per_thread ? ", or with --touch none (the heap's pages are then never written)" : "",
      per_thread > heap && per_thread > table ? ", or with fewer replay threads (--threads N)" : "");
}

// Whether the replay writes every byte of the trace's live heap
// (memory_check()'s rule: --touch pages or all, or recorded where no
// object's pages were counted).
bool writes_whole_heap(const trace::TraceReader& r, const ReplaySettings& settings) {
  return settings.touch == Touch::pages || settings.touch == Touch::all ||
         (settings.touch == Touch::recorded && r.memory_objects_with_pages() == 0);
}

uint64_t plus_windows(uint64_t heap) {
  return heap > UINT64_MAX - kPlanWindowBudget ? UINT64_MAX : heap + kPlanWindowBudget;
}

// A refusal before memory_check() can count the rest: `need` in all, of
// which `parts` (each "X for Y, ") and the plan's windows at their least,
// against `available`; --touch none named as the way out where the heap's
// pages are what does not fit.
std::string early_refusal(uint64_t need, const std::string& parts, uint64_t available, bool touch_none_helps) {
  return fmt::format(
      "the replay needs at least {} of memory ({}{} for the plan's windows) and this machine has {} available: replay "
      "on a machine with more memory{}",
      common::gib_text(need), parts, common::gib_text(kPlanWindowBudget), common::gib_text(available),
      touch_none_helps ? ", or with --touch none (the heap's pages are then never written)" : "");
}

// The refusal of a heap that cannot fit: `heap` for the trace's live heap
// (`where`: where that figure comes from) and the plan's windows.
std::string heap_refusal(uint64_t heap, const std::string& where, uint64_t available) {
  return early_refusal(plus_windows(heap),
                       fmt::format("{} for the trace's live heap{}, ", common::gib_text(heap), where), available, true);
}

// Before any plan is built, the part of memory_check() a captured or
// imported trace already states: its live heap at its peak
// (capture.heap_live_peak_bytes, which the normaliser and the importers'
// writer count as the plan does: the requested bytes, in the trace's
// order) where the touch mode writes it, and the objects live at once
// (capture.live_objects_peak, counted the same way): the object table has
// a slot for each at least, and --touch first writes a page of each at
// most. With the plan's windows at their least, against `available` (0:
// unknown). A trace that cannot fit is refused at once, not after building
// a plan as long as the trace. "" if it may fit, or the trace does not say
// (written by another tool or an older heaplab, a trace that lost its
// end): the build stops where the heap passes what fits
// (PlanOptions::live_limit), and memory_check() decides after it.
std::string early_memory_check(const trace::TraceReader& r, const ReplaySettings& settings, uint64_t available) {
  if (available == 0 || !r.complete()) return "";
  const nlohmann::json meta = common::parse_bounded_json(r.metadata());
  if (!meta.is_object() || !meta.contains("capture") || !meta["capture"].is_object()) return "";
  const nlohmann::json& c = meta["capture"];
  const auto stated = [&](const char* key) -> std::optional<uint64_t> {
    if (!c.contains(key) || !c[key].is_number_unsigned()) return std::nullopt;
    return c[key].get<uint64_t>();
  };
  const std::optional<uint64_t> bytes = stated("heap_live_peak_bytes"), objects = stated("live_objects_peak");
  if (!bytes) return "";
  const bool imported = c.contains("method") && c["method"] == "import";
  const std::string where =
      imported ? " at its peak, as its import counted it" : " at its peak, as its capture counted it";
  if (!objects) {  // (a trace written before the objects were counted)
    if (!writes_whole_heap(r, settings) || plus_windows(*bytes) <= available) return "";
    return heap_refusal(*bytes, where, available);
  }
  constexpr uint64_t kPage = 4096, kMaxObjects = UINT64_MAX / kPage;
  const uint64_t pages = *objects >= kMaxObjects ? UINT64_MAX : *objects * kPage;
  uint64_t heap = 0;
  if (writes_whole_heap(r, settings))
    heap = *bytes;
  else if (settings.touch == Touch::first)
    heap = std::min(*bytes, pages);
  const uint64_t table = *objects >= kMaxObjects ? UINT64_MAX : (*objects + 1) * 8;
  const uint64_t windowed = plus_windows(heap);
  const uint64_t need = windowed > UINT64_MAX - table ? UINT64_MAX : windowed + table;
  if (need <= available) return "";
  // What does not fit, named: the heap the replay writes, where it does;
  // the table where it shows (from 64 MiB, a tenth of a GiB) or is what
  // does not fit; the windows.
  std::string parts;
  if (heap != 0)
    parts = heap < *bytes ? fmt::format("{} for a page of each of the {} objects live at once (--touch first), ",
                                        common::gib_text(heap), group_digits(*objects))
                          : fmt::format("{} for the trace's live heap{}, ", common::gib_text(heap), where);
  if (heap == 0 || table >= kPlanWindowBudget)
    parts += fmt::format("{} for the object table of {} objects live at once, ", common::gib_text(table),
                         group_digits(*objects));
  return early_refusal(need, parts, available, heap > table);
}

// The build stopped where the trace's live heap passed what this machine
// has (PlanOptions::live_limit, the memory available less the plan's
// windows): the same refusal, at that point.
ReplayError live_limit_error(const std::string& trace, const PlanLiveLimit& e) {
  return ReplayError(
      trace + ": " +
      heap_refusal(e.live_bytes,
                   fmt::format(", reached at event {} of {}", group_digits(e.event), group_digits(e.events)),
                   plus_windows(e.limit)));
}

// The last build this process stopped at its live limit, by plan key: the
// next allocator of `--allocator all` (or load of `--load both`) with the
// same plan, where the heap found still cannot fit, is refused at once, not
// after the same partial build.
struct RefusedBuild {
  std::string key;
  std::optional<PlanLiveLimit> error;
};
RefusedBuild& refused_build() {
  static RefusedBuild r;
  return r;
}

}  // namespace

std::string file_id(const std::string& path, const trace::TraceReader::FileStamp* expect) {
  // XXH3-64 of the whole file, read 4 MiB at a time (a mapping of a
  // multi-GiB trace would count in heaplab's RSS); the same value as the
  // one-shot hash.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const auto stamp = [&]() -> std::optional<trace::TraceReader::FileStamp> {
    struct stat st {};
    if (fstat(fd, &st) != 0) return std::nullopt;
    return trace::file_stamp_of(st);
  };
  if (expect && stamp() != *expect) {
    close(fd);
    return "";
  }
  XXH3_state_t* state = XXH3_createState();
  std::string id;
  if (state && XXH3_64bits_reset(state) == XXH_OK) {
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    std::vector<char> buf(size_t{4} << 20);
    bool ok = true;
    for (;;) {
      const ssize_t n = read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) ok = false;
      if (n <= 0) break;
      XXH3_64bits_update(state, buf.data(), size_t(n));
    }
    if (ok) id = fmt::format("{:016x}", XXH3_64bits_digest(state));
  }
  XXH3_freeState(state);
  if (expect && stamp() != *expect) id.clear();  // written while it was hashed
  close(fd);
  return id;
}

namespace {

// The object table a replayer wrote to `fd` (--table-fd), read as each
// event's address: its ref's slot, if the slot holds that ref's generation
// (the replay made the call), less the generation; NULL results read as 0.
void read_addresses(int fd, const std::vector<uint64_t>& event_refs, std::vector<uint64_t>& out) {
  out.assign(event_refs.size(), 0);
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) return;
  const size_t len = size_t(st.st_size);
  void* m = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) throw ReplayError(std::string("reading the replay's object table: ") + std::strerror(errno));
  const auto* table = static_cast<const uint64_t*>(m);
  const size_t slots = len / sizeof(uint64_t);
  for (size_t i = 0; i < event_refs.size(); ++i) {
    const uint64_t ref = event_refs[i];
    if (ref == 0 || ref_slot(ref) >= slots) continue;
    const uint64_t v = table[ref_slot(ref)];
    if ((v >> kValueGenerationShift) != ref_generation(ref)) continue;
    const uint64_t p = v & kPointerMask;
    out[i] = p == kNullObject ? 0 : p;
  }
  munmap(m, len);
}

}  // namespace

void check_launchable(const ReplayOptions& opt) { (void)resolve(opt); }

namespace {

// run_replay; `any_allocator` says whether what it throws now would be
// thrown for any allocator (set around the allocator's own checks).
ReplayOutcome replay_once(const ReplayOptions& opt, bool& any_allocator) {
  any_allocator = true;
  // Settings made by hand (not through the table's parser) are checked too.
  for (const char* key : {"speed", "pin", "membind"}) {
    const SettingInfo& info = *find_setting(key);
    ReplaySettings copy = opt.settings;
    if (std::string why = set_setting(copy, info, setting_text(opt.settings, info)); !why.empty())
      throw ReplayError(std::string(info.option) + ": " + why);
  }
  if (std::string why = check_settings(opt.settings); !why.empty()) throw ReplayError(why);
  try {
    (void)PlanStore::limit_set();
  } catch (const PlanError& e) {
    throw ReplayError(e.what());
  }
  any_allocator = false;
  const Launch l = resolve(opt);
  any_allocator = true;
  // Sizing the plan beyond the file-size limit must fail with EFBIG (and a
  // message), not kill heaplab.
  signal(SIGXFSZ, SIG_IGN);

  std::unique_ptr<trace::TraceReader> reader;
  try {
    reader = trace::TraceReader::open(opt.trace);
  } catch (const std::exception& e) {
    throw ReplayError(e.what());
  }
  if (opt.settings.timing == Timing::recorded && !reader->has_time())
    throw ReplayError(opt.trace + ": --timing recorded: the trace has no timestamps");
  // One replay thread per recorded thread (or --threads; threads that never
  // ran at once share one): refused at once if this machine cannot start
  // that many, before any plan is built.
  {
    const uint64_t recorded = reader->active_threads().size();
    uint64_t want = opt.settings.threads ? std::min<uint64_t>(opt.settings.threads, recorded) : recorded;
    const uint64_t limit = thread_limit();
    bool at_once = false;
    if (want > limit) {  // (only then: this decodes each thread's last chunk)
      bool sequential = false;
      try {
        want = fold_threads(*reader, opt.settings.threads, &sequential).size();
      } catch (const std::exception& e) {
        throw ReplayError(e.what());
      }
      at_once = sequential;
    }
    if (limit == 0)
      throw ReplayError(fmt::format(
          "{}: no replay thread can start here: the tasks running now reach a limit (vm.max_map_count, "
          "kernel.threads-max and pid_max, the cgroup's pids.max, or ulimit -u with this user's other tasks); end "
          "some of them, or raise the limit",
          opt.trace));
    if (want > limit)
      throw ReplayError(fmt::format(
          "{}: the replay would start {} threads (one per recorded thread{}) and a process here can start about {} "
          "(vm.max_map_count, kernel.threads-max and pid_max, the cgroup's pids.max, ulimit -u): fold them with "
          "--threads {} or fewer",
          opt.trace, group_digits(want), at_once ? " running at once" : "", group_digits(limit),
          std::max<uint64_t>(1, limit * 9 / 10)));
  }
  // The heap against the memory available, read once: stated by the trace
  // (checked now), else found by the plan's build (its limit).
  const uint64_t available = trace::memory_available();
  if (std::string why = early_memory_check(*reader, opt.settings, available); !why.empty())
    throw ReplayError(opt.trace + ": " + why);
  PlanSummary plan;
  int plan_fd = -1;
  const auto plan_start = std::chrono::steady_clock::now();
  PlanOptions popt{opt.settings.threads, opt.settings.timing == Timing::recorded, opt.settings.memory};
  if (available > kPlanWindowBudget && writes_whole_heap(*reader, opt.settings))
    popt.live_limit = available - kPlanWindowBudget;
  const std::string key = plan_key(opt.trace, popt);
  // The plan: the one this process built last for this trace and options,
  // else the one kept on disk for the trace's content (replay/plan_store.h),
  // else built now (and kept if there is room).
  bool reused = false, kept = false;
  std::string source = "built", where;
  std::pair<uint64_t, uint64_t> kept_file{0, 0};  // the kept plan found (device, inode)
  std::string not_kept;                           // a warning: the plan was meant to be kept, and was not
  std::string damaged_kept;                       // a warning: the kept plan found was damaged
  std::vector<uint64_t> event_refs;
  if (opt.addresses) {
    // 8 bytes a call for the refs and 8 for the addresses here, and up to
    // 8 a call (an object each) for the replayer's table, and the plan,
    // built in memory (a memfd): checked first.
    PlanOptions own = popt;
    own.reuse_slots = false;
    uint64_t in_plan = 0;
    try {
      in_plan = plan_bytes_at_most(*reader, own);  // (decodes each thread's last chunk: fold_threads)
    } catch (const trace::TraceError& e) {
      throw ReplayError(e.what());
    }
    const uint64_t need = reader->event_count() * 24 + in_plan;
    if (available != 0 && need > available)
      throw ReplayError(fmt::format(
          "{}: recording the addresses of its {} calls needs {} of memory (24 bytes a call, and {} for the replay "
          "plan) and this machine has {} available: use a machine with more memory",
          opt.trace, group_digits(reader->event_count()), common::gib_text(need), common::gib_text(in_plan),
          common::gib_text(available)));
    event_refs.reserve(reader->event_count());
    try {
      plan_fd = build_plan(*reader, own, plan, -1, &event_refs);
    } catch (const trace::TraceError& e) {
      throw ReplayError(e.what());
    } catch (const PlanLiveLimit& e) {
      throw live_limit_error(opt.trace, e);
    } catch (const PlanError& e) {
      throw ReplayError(opt.trace + ": " + e.what());
    }
  } else if (const RefusedBuild& no = refused_build();
             popt.live_limit != 0 && !key.empty() && no.key == key && popt.live_limit < no.error->live_bytes) {
    // (The heap found then is past this limit too, even where the memory
    // available has grown a little since.)
    throw live_limit_error(opt.trace,
                           PlanLiveLimit(no.error->live_bytes, no.error->event, no.error->events, popt.live_limit));
  } else if (PlanCache& c = plan_cache(); !key.empty() && c.key == key) {
    plan_fd = fcntl(c.fd, F_DUPFD_CLOEXEC, 0);
    if (plan_fd >= 0) {
      plan = c.summary;
      reused = true;
      source = "this command";
    }
  }
  const std::string trace_id = reused ? plan_cache().trace_id : file_id(opt.trace, &reader->file_stamp());
  // (Without an id the plan is neither looked up nor kept: said below.)
  const bool unidentified = !reused && !opt.addresses && trace_id.empty();
  if (!reused && !opt.addresses) {
    const PlanStore store;
    where = store.dir();
    std::string damaged;
    plan_fd = store.find(trace_id, popt, plan, &damaged);
    if (!damaged.empty()) damaged_kept = "the kept replay plan was damaged (" + damaged + "): removed, and built again";
    if (plan_fd >= 0) {
      reused = true;
      source = "kept";
      struct stat st {};
      if (fstat(plan_fd, &st) == 0) kept_file = {uint64_t(st.st_dev), uint64_t(st.st_ino)};
    } else {
      try {
        plan_fd = store.build(*reader, popt, trace_id, plan, kept, where);
        if (!store.not_kept().empty())
          not_kept = "the replay plan was built for this command alone, not kept for later ones: " + store.not_kept();
      } catch (const trace::TraceError& e) {
        throw ReplayError(e.what());
      } catch (const PlanLiveLimit& e) {
        refused_build() = {key, e};
        throw live_limit_error(opt.trace, e);
      } catch (const PlanError& e) {
        throw ReplayError(opt.trace + ": " + e.what());
      }
    }
    plan_cache().keep(key, plan_fd, plan, trace_id);
  }
  // (The plan's steps also hold its memory calls, handoffs and kStepExt
  // steps: plan.h.)
  const uint64_t calls = std::accumulate(plan.ops.begin(), plan.ops.end(), uint64_t{0});
  const uint64_t memory_steps = std::accumulate(plan.memory_ops.begin(), plan.memory_ops.end(), uint64_t{0});
  if (std::string why = memory_check(plan, opt.settings); !why.empty()) {
    close(plan_fd);
    throw ReplayError(opt.trace + ": " + why);
  }

  const double plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - plan_start).count();
  nlohmann::json trace_j = {{"path", opt.trace},
                            {"id", trace_id},
                            {"events", plan.events},
                            {"calls", calls},
                            {"complete", reader->complete()},
                            {"recorded_threads", plan.recorded_threads},
                            {"objects", plan.objects},
                            {"bytes_requested", plan.bytes_requested},
                            {"live_bytes_peak", plan.live_bytes_peak},
                            {"live_bytes_end", plan.live_bytes_end},
                            {"cross_thread_consumes", plan.cross_thread_consumes},
                            {"table_slots", plan.slots},
                            {"slot_handoffs", plan.handoffs},
                            {"threads_one_after_another", plan.sequential},
                            {"new_thread_steps", plan.new_threads},
                            {"consumes_of_lost_objects_skipped", plan.skipped_lost},
                            {"reallocs_of_lost_objects", plan.realloc_of_lost},
                            {"sizes_corrected", plan.sizes_corrected},
                            {"alignments_corrected", plan.alignments_corrected}};
  if (memory_steps != 0)
    trace_j["memory"] = {{"regions", plan.regions},
                         {"mapped_bytes_peak", plan.mapped_peak},
                         {"steps", memory_steps},
                         {"objects_with_resident_pages", plan.recorded_touches},
                         {"unknown_regions_skipped", plan.unknown_regions}};
  // What share of the captured program's anonymous memory the trace explains.
  std::string coverage_warning, metadata_why, times_warning;
  const nlohmann::json meta = common::parse_bounded_json(reader->metadata(), &metadata_why);
  const nlohmann::json* capture =
      meta.is_object() && meta.contains("capture") && meta["capture"].is_object() ? &meta["capture"] : nullptr;
  if (capture && capture->contains("coverage") && (*capture)["coverage"].is_number()) {
    const nlohmann::json& c = *capture;
    const double share = c["coverage"].get<double>();
    trace_j["coverage"] = {{"share", share},
                           {"program_anon_peak_kib", c.value("anon_rss_peak_kib", uint64_t{0})},
                           {"explained_peak_bytes", c.value("explained_peak_bytes", uint64_t{0})}};
    if (common::coverage_warns(share, c.value("explained_peak_bytes", uint64_t{0}),
                               c.value("anon_rss_peak_kib", uint64_t{0})))
      coverage_warning = common::coverage_text(share, c.value("explained_peak_bytes", uint64_t{0}),
                                               c.value("anon_rss_peak_kib", uint64_t{0}))
                             .substr(std::string_view("warning: ").size());
  }
  // A capture of several threads whose shim cost was taken off each
  // thread's own times (normalised by heaplab before capture.time_correction
  // was written): a busy thread's times sat still whenever a less busy one
  // wrote, so its calls would run here in bursts.
  if (opt.settings.timing == Timing::recorded && capture && common::times_per_thread(*capture, plan.recorded_threads))
    times_warning = common::times_per_thread_text(
        "--timing recorded then runs its calls in bursts; capture the program again, or normalise its kept raw "
        "files again (heaplab import --from heaplab-raw), for its pace");
  if (!plan.program_latency.empty()) {
    // The calls the program timed inside its allocator (heaplab capture
    // --latency), per op; `--latency-of program` times the same calls here.
    nlohmann::json ops = nlohmann::json::object();
    for (const ProgramLatency& p : plan.program_latency)
      ops[std::string(trace::op_name(static_cast<trace::Op>(p.op)))] = {{"samples", p.samples},
                                                                        {"mean_ns", p.mean_ns},
                                                                        {"p50_ns", double(p.p50_ns)},
                                                                        {"p90_ns", double(p.p90_ns)},
                                                                        {"p99_ns", double(p.p99_ns)}};
    trace_j["program_latency"] = {{"ops", ops}};
  }
  if (plan.has_times || reader->has_time()) trace_j["duration_s"] = double(plan.duration_ns) / 1e9;
  if (!reader->complete()) trace_j["warning"] = reader->warning();
  reader.reset();

  any_allocator = false;  // (from here on, this replay's own)
  std::vector<std::string> argv = {l.exe, "--plan-fd", "3", "--result-fd", "4", "--load", opt.load};
  // The object table comes back in a memfd (fd 5) when addresses are asked for.
  int table_fd = -1;
  if (opt.addresses) {
    table_fd = memfd_create("heaplab-table", MFD_CLOEXEC);
    if (table_fd < 0) {
      close(plan_fd);
      throw ReplayError(std::string("cannot create a file for the object table: ") + std::strerror(errno));
    }
    argv.insert(argv.end(), {"--table-fd", "5"});
  }
  struct CloseTable {
    int& fd;
    ~CloseTable() {
      if (fd >= 0) close(fd);
    }
  } close_table{table_fd};
  for (std::string& a : to_args(opt.settings)) argv.push_back(std::move(a));
  argv.insert(argv.end(), l.args.begin(), l.args.end());
  argv.insert(argv.end(), {"--label", opt.allocator});

  // The replayer: fds 3 and 4 are the plan and the result pipe; it dies with
  // heaplab (a replay nobody reads is wasted CPU).
  process::Spec spec;
  spec.argv = std::move(argv);
  for (const auto& [k, v] : opt.env) spec.env.emplace_back(k, v);
  spec.env.emplace_back("LD_PRELOAD", l.preload.empty() ? std::nullopt : std::optional<std::string>(l.preload));
  spec.die_with_parent = true;
  spec.default_signals = {SIGXFSZ};
  std::string out, exec_error;
  int status = 0;
  const double timeout_s =
      opt.timeout_s > 0
          ? opt.timeout_s
          : default_timeout_s(
                calls, plan.bytes_requested,
                opt.settings.timing == Timing::recorded ? double(plan.duration_ns) / 1e9 / opt.settings.speed : 0);
  // A replay at the recorded pace lasts as long as the program ran: say so
  // before a long one starts, not after.
  if (opt.settings.timing == Timing::recorded) {
    const double paced_s = double(plan.duration_ns) / 1e9 / opt.settings.speed;
    if (paced_s >= 60) {
      const long v = std::lround(paced_s);
      fmt::print(
          stderr,
          "heaplab: note: replaying at the recorded pace takes about {} (the program's own run{}); --speed N "
          "or --timing fast shorten it{}\n",
          v >= 3600 ? fmt::format("{} h {:02} min", v / 3600, v / 60 % 60)
                    : fmt::format("{} min {:02} s", v / 60, v % 60),
          opt.settings.speed != 1 ? fmt::format(" at speed {}", opt.settings.speed) : "",
          timeout_s < paced_s ? fmt::format("; the --timeout of {} s ends it first", seconds_text(timeout_s)) : "");
    }
  }
  bool timed_out = false, addresses_read = false;
  try {
    process::Pipe result;
    spec.fds = {{3, plan_fd}, {4, result.write}};
    if (table_fd >= 0) spec.fds.emplace_back(5, table_fd);
    process::Child child = process::spawn(spec);
    close(plan_fd);
    plan_fd = -1;
    result.close_write();
    try {
      timed_out = !process::read_all(result.read, out, timeout_s);
    } catch (const std::runtime_error& e) {
      throw ReplayError(std::string("reading the replayer's result: ") + e.what());
    }
    if (timed_out) child.kill(SIGKILL);
    status = child.wait();
    if (opt.addresses && !timed_out && WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3)) {
      read_addresses(table_fd, event_refs, *opt.addresses);
      addresses_read = true;
    }
  } catch (const process::SpawnError& e) {
    if (plan_fd >= 0) close(plan_fd);
    if (!e.exec_failed()) throw ReplayError(e.what());
    // The replayer could not be run (relinked right now, a noexec mount, a
    // wrong architecture): a failed replay with its result, as an exit 127.
    status = 127 << 8;
    exec_error = std::strerror(e.err());
  }

  ReplayOutcome o;
  o.addresses_read = addresses_read;
  nlohmann::json& r = o.result;
  r["format"] = "heaplab-replay-result";
  r["format_version"] = 1;
  r["trace"] = trace_j;
  if (!coverage_warning.empty()) r["warnings"].push_back(coverage_warning);
  if (!times_warning.empty()) r["warnings"].push_back(times_warning);
  if (opt.settings.latency_program && plan.program_latency.empty())
    r["warnings"].push_back(
        "--latency-of program: the trace has no calls the program timed (capture it with --latency N): no latency "
        "was measured");
  if (!not_kept.empty()) r["warnings"].push_back(not_kept);
  if (!damaged_kept.empty()) r["warnings"].push_back(damaged_kept);
  if (unidentified)
    r["warnings"].push_back(opt.trace +
                            " could not be read again by its name to identify it (replaced or rewritten since it was "
                            "opened?): its replay plan was built for this command alone, not looked up or kept");
  // A replay of what a damaged or cut trace kept is not the program's: said
  // where the summary says "as recorded".
  if (trace_j.contains("warning"))
    r["warnings"].push_back(fmt::format(
        "{}: only the calls the trace kept are replayed ({} frees of objects whose allocation was lost skipped, {} "
        "reallocs of such objects replayed from NULL); the program made more",
        trace_j["warning"].get<std::string>(), group_digits(plan.skipped_lost), group_digits(plan.realloc_of_lost)));
  if (!metadata_why.empty())
    r["warnings"].push_back("the trace's metadata was not read (" + metadata_why +
                            "): what it says of the capture (coverage, the program's memory) is left out");
  if (plan.sizes_corrected + plan.alignments_corrected != 0)
    r["warnings"].push_back(fmt::format(
        "the trace has calls that are undefined for allocators ({} sized deletes naming another size than their "
        "object's, {} alignments their call does not take (not a power of two; below a pointer's size for "
        "posix_memalign) or not the object's): replayed with the object's own size and alignment, or the next "
        "alignment taken (heaplab check lists them)",
        plan.sizes_corrected, plan.alignments_corrected));
  r["allocator"] = {
      {"name", opt.allocator}, {"load", opt.load}, {"library", l.library}, {"settings", allocator_settings(opt.env)}};
  r["plan_build_s"] = plan_s;
  r["plan_reused"] = reused;
  // built: now, for this replay; this command: by an earlier replay of this
  // command; kept: by an earlier command (replay/plan_store.h).
  r["plan_source"] = source;
  if (!where.empty()) r["plan_dir"] = where;
  if (source == "built") r["plan_kept"] = kept;
  r["replay_threads"] = plan.replay_threads;
  nlohmann::json fold = nlohmann::json::array();
  for (const auto& f : plan.fold) fold.push_back(f);
  r["thread_map"] = fold;
  nlohmann::json replay;
  if (!out.empty()) {
    try {
      replay = nlohmann::json::parse(out);
    } catch (const std::exception&) {
      replay = nullptr;
    }
  }
  if (replay.is_object() && replay.contains("error")) {
    // The replayer refused its input (exit 2: e.g. a library that cannot
    // be loaded directly) or failed while running (exit 1).
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r["exit"] = {{"status", "error"}, {"code", code}};
    o.error = replay["error"].is_string() ? replay["error"].get<std::string>() : replay["error"].dump();
    o.exit_code = code == 2 ? 2 : 1;
    // A plan kept on disk, found by this replay, whose steps the replayer
    // refused (or that another program cut short): damaged since it was
    // kept. Removed, if it is still the file by that name.
    if (code == 2 && source == "kept" && replay.value("plan_damaged", false)) {
      PlanStore().remove(trace_id, popt, kept_file);
      plan_cache().keep("", -1, PlanSummary{}, "");
      o.damaged_kept_plan = true;
    }
    return o;
  }
  if (replay.is_object()) {
    for (const char* k : {"version", "build_id", "library", "emulated"})
      if (replay["allocator"].contains(k)) r["allocator"][k] = replay["allocator"][k];
    // The library that answered malloc in the replayer is the one asked for
    // (else something of the replayer's own, or of its environment, did).
    // (A direct replayer of a known allocator is linked against it by design.)
    const bool linked_in = opt.load == "direct" && l.library.empty() && opt.allocator != "glibc";
    if (!linked_in && replay["allocator"].contains("library") && replay["allocator"]["library"].is_string()) {
      std::error_code ec;
      const std::string answered = replay["allocator"]["library"].get<std::string>();
      const bool same =
          l.library.empty()
              ? answered.find("/libc.so") != std::string::npos || answered.find("/libc-") != std::string::npos
              : std::filesystem::weakly_canonical(answered, ec) == std::filesystem::weakly_canonical(l.library, ec);
      if (!answered.empty() && !same)
        r["warnings"].push_back(
            fmt::format("malloc in the replayer was answered by {}, not by {} as asked: the "
                        "replayer brings an allocator of its own; its figures are {}'s",
                        answered, l.library.empty() ? "glibc" : l.library, answered));
    }
    replay.erase("allocator");
    const int cpus = replay["environment"].value("cpus_allowed", 0);
    if (cpus > 0 && plan.replay_threads > uint32_t(cpus))
      r["warnings"].push_back(
          fmt::format("{} replay threads on {} CPUs: threads share cores, so waits and times include scheduling "
                      "(--threads {} folds them)",
                      plan.replay_threads, cpus, cpus));
    // How much of the trace's live peak the sampler saw: a replay shorter
    // than a few sampling intervals can miss it, and fragmentation at a
    // small live value says little.
    if (replay.contains("memory") && plan.live_bytes_peak > 0)
      replay["memory"]["live_peak_sampled_fraction"] =
          double(replay["memory"].value("live_bytes_peak_sampled", int64_t{0})) / double(plan.live_bytes_peak);
    r["replay"] = replay;
  }
  nlohmann::json exit_j;
  if (timed_out) {
    r["exit"] = {{"status", "timeout"}, {"after_s", timeout_s}};
    o.error = fmt::format(
        "the replay did not finish within {} s on allocator '{}' ({}): killed (a hung allocator? --timeout "
        "sets the limit)",
        seconds_text(timeout_s), opt.allocator, opt.load);
    o.exit_code = 1;
    return o;
  }
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    exit_j = {{"status", code == 0 ? "ok" : code == 3 ? "unfaithful" : "error"}, {"code", code}};
    if (code == 127)
      o.error = "cannot run the replayer '" + l.exe + "'" + (exec_error.empty() ? "" : ": " + exec_error);
    else if (code == 3)
      o.error = "the replay's call counts differ from the trace's";
    else if (code != 0)
      o.error = "the replayer failed (exit status " + std::to_string(code) + ")";
    else if (!replay.is_object())
      o.error = "the replayer wrote no result";
  } else if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    exit_j = {{"status", "crashed"}, {"signal", sig}, {"signal_name", signal_name(sig)}};
    o.error =
        "the replayer was killed by " + signal_name(sig) + " (on allocator '" + opt.allocator + "', " + opt.load + ")";
  }
  r["exit"] = exit_j;
  o.exit_code = o.error.empty() ? 0 : 1;
  return o;
}

}  // namespace

ReplayOutcome run_replay(const ReplayOptions& opt) {
  bool any_allocator = false;
  try {
    ReplayOutcome o = replay_once(opt, any_allocator);
    if (o.damaged_kept_plan) {  // built again, once
      const std::string why = o.error;
      o = replay_once(opt, any_allocator);
      if (o.result.is_object())
        o.result["warnings"].push_back("the kept replay plan was damaged (" + why + "): removed, and built again");
    }
    return o;
  } catch (const TraceRefused&) {
    throw;
  } catch (const NotAvailable&) {
    throw;
  } catch (const ReplayError& e) {
    if (any_allocator) throw TraceRefused(e.what());
    throw;
  }
}

std::string result_summary(const nlohmann::json& document) {
  const ReplayResult r = result_from_json(document);
  std::string s;
  s += fmt::format("replay of {} ({} calls, {} recorded thread{} on {}) on {} ({}{}{})\n", r.trace_path,
                   group_digits(r.trace_calls), group_digits(r.recorded_threads), r.recorded_threads == 1 ? "" : "s",
                   r.replay_threads, r.allocator, r.load, r.version.empty() ? "" : ", " + r.version,
                   r.library.empty() ? "" : ", " + r.library);
  for (const std::string& w : r.warnings) s += "  warning: " + w + "\n";
  if (!r.ran) return s;
  const double book_mib = double(r.bookkeeping_plan_bytes + r.bookkeeping_table_bytes) / 1048576.0;
  s += fmt::format("  wall {:.3f} s, {:.2f} M calls/s, cpu user {:.3f} s + system {:.3f} s\n", r.wall_s,
                   r.calls_per_s.value_or(0) / 1e6, r.cpu_user_s.value_or(0), r.cpu_system_s.value_or(0));
  s += fmt::format("  max RSS {:.1f} MiB, of which {:.1f} MiB the replayer's plan and object table\n",
                   r.max_rss_kib.value_or(0) / 1024.0, book_mib);
  std::string ops;
  for (const auto& [name, o] : r.ops)
    ops += fmt::format("{}{} {}", ops.empty() ? "" : ", ", name, group_digits(o.calls));
  s += fmt::format("  calls {}: {}\n", r.calls_match ? "exactly as recorded" : "DIFFER from the trace",
                   ops.empty() ? "none" : ops);
  if (r.calls_match && !r.results_match) s += "  " + r.unfaithful() + "\n";
  if (r.cross_thread_waits != 0)
    s += fmt::format("  cross-thread waits: {} ({:.3f} ms in all threads)\n", group_digits(r.cross_thread_waits),
                     double(r.cross_thread_wait_ns) / 1e6);
  s += fmt::format("  live requested bytes peak (trace order): {}\n", group_digits(r.live_bytes_peak));
  if (r.memory && r.memory->frag_at_live_peak) {
    const MemoryResult& m = *r.memory;
    const auto mib = [](double kib) { return kib / 1024.0; };
    s += fmt::format("  heap RSS: peak {:.1f} MiB, final {:.1f} MiB; {} samples {}\n", mib(m.heap_peak_kib.value_or(0)),
                     mib(m.heap_final_kib.value_or(0)), m.samples,
                     m.interval_ms ? fmt::format("every {} ms", m.interval_ms)
                                   : std::string("(at the start and the end only: --sample-ms 0)"));
    // At the end only where a good part of the peak is still live (else a
    // ratio of a few bytes).
    std::string final_frag;
    const auto& tl = m.timeline.live_bytes;
    if (!tl.empty() && 4 * tl.back() >= m.live_bytes_peak_sampled)
      final_frag = fmt::format(", at the end {:.2f}", m.frag_final.value_or(0));
    const bool untouched = document.contains("replay") && document["replay"].value("touch", "") == "none";
    if (untouched)
      s += "  fragmentation: not measured: --touch none writes none of the heap's pages\n";
    else if (r.live_peak_measured())
      s += fmt::format(
          "  at the live peak ({:.1f} MiB live, {}) heap RSS {:.1f} MiB: fragmentation {:.2f} "
          "(time-weighted {:.2f}{})\n",
          double(m.live_bytes_peak_sampled) / 1048576.0,
          m.at_live_peak_source == "periodic sample" ? "sampled" : "snapshot", mib(m.heap_kib_at_live_peak.value_or(0)),
          m.frag_at_live_peak.value_or(0), m.frag_time_weighted.value_or(0), final_frag);
    else
      s += fmt::format("  fragmentation: not measured: the samples saw {:.0f}% of the live peak ({})\n",
                       100.0 * m.live_peak_sampled_fraction,
                       r.live_bytes_peak == 0 ? std::string("nothing is ever live")
                       : m.interval_ms > 1
                           ? "the replay is short against --sample-ms; try --sample-ms 1 or --timing recorded"
                           : std::string("the replay is too short for the samples; try --timing recorded"));
  }
  if (r.memory && r.memory->has_footprint) {
    const MemoryResult& m = *r.memory;
    const auto pages = [](const std::optional<int64_t>& p) {
      return p ? group_digits(uint64_t(std::max<int64_t>(0, *p))) : std::string("-");
    };
    s += fmt::format("  page footprint (mincore): {} pages at the live peak, {} at the end\n",
                     pages(m.pages_at_live_peak ? m.pages_at_live_peak : m.pages_at_live_high), pages(m.pages_at_end));
    const std::string touched = m.pages_touched ? pages(m.pages_touched) + " (soft-dirty)"
                                                : "not measured: " + m.touched_why.substr(0, m.touched_why.find(';'));
    s += fmt::format("  pages written during the replay: {}; page faults: {} minor, {} major\n", touched,
                     group_digits(uint64_t(r.minor_faults.value_or(0))),
                     group_digits(uint64_t(r.major_faults.value_or(0))));
  }
  if (r.latency && !r.latency->ops.empty()) {
    const LatencyResult& l = *r.latency;
    s += fmt::format("  latency (ns; {}; timer cost {:.1f} ns subtracted):\n",
                     l.sample_every ? fmt::format("every {} call(s) timed", l.sample_every)
                                    : std::string("the calls the program timed"),
                     l.timer_overhead_ns);
    for (const auto& [name, o] : l.ops)
      s += fmt::format(
          "    {:<24} p50 {:>8.0f}  p90 {:>8.0f}  p99 {:>8.0f}  p99.9 {:>9.0f}  max {:>10.0f}  ({} samples)\n", name,
          o.p50.value_or(0), o.p90.value_or(0), o.p99.value_or(0), o.p999.value_or(0), o.max.value_or(0),
          group_digits(o.samples));
  }
  // The same calls as the program timed them inside its allocator (capture --latency).
  const nlohmann::json* program = nullptr;
  if (document.contains("trace") && document["trace"].contains("program_latency"))
    program = &document["trace"]["program_latency"]["ops"];
  if (program && program->is_object()) {
    const bool same = r.latency && document.contains("replay") && document["replay"].contains("latency") &&
                      document["replay"]["latency"].value("calls", "") == "program";
    s += fmt::format(
        "  latency in the program (ns, the calls it timed){}:\n",
        same ? ", and of the same calls here" : "; replay with --latency-of program to time the same calls");
    for (const auto& [name, o] : program->items()) {
      std::string line = fmt::format("    {:<24} program p50 {:>6.0f}  p99 {:>7.0f}", name, o.value("p50_ns", 0.0),
                                     o.value("p99_ns", 0.0));
      if (same)
        if (auto it = r.latency->ops.find(name); it != r.latency->ops.end())
          line += fmt::format("   replay p50 {:>6.0f}  p99 {:>7.0f}", it->second.p50.value_or(0),
                              it->second.p99.value_or(0));
      s += line + fmt::format("  ({} samples)\n", group_digits(o.value("samples", uint64_t{0})));
    }
  }
  return s;
}

std::string list_allocators(const std::string& dir_given) {
  const std::string dir = replayer_dir(dir_given);
  std::string s = fmt::format("{:<10} {:<52} {}\n", "allocator", "preload", "direct");
  for (const auto& k : allocators::known_allocators()) {
    std::string err;
    auto lib = allocators::resolve_allocator(k.name, err);
    std::string pre =
        lib ? "yes" + (lib->path.empty() ? std::string(" (the system allocator)") : " (" + lib->path + ")")
            : "no: " + err;
    const std::string exe = dir + "/" + k.replayer;
    std::string direct;
    if (!is_executable(exe))
      direct = "no: " + k.replayer + " not built (install " + k.dev_package + " and rebuild)";
    else if (!lib && !k.soname.empty())
      direct = "no: " + k.soname + " is not installed (Debian package " + k.package + ")";
    else
      direct = "yes (" + k.replayer + ")";
    s += fmt::format("{:<10} {:<52} {}\n", k.name, pre, direct);
  }
  s += fmt::format("{:<10} {:<52} {}\n", "PATH.so", "any allocator library that defines malloc",
                   "dlopen'ed with RTLD_DEEPBIND, called through its own functions");
  return s;
}

}  // namespace heaplab::replay
