#include "replay/plan_store.h"

#include "common/files.h"
#include "common/json.h"
#include "capture/format/memory_available.h"
#include "common/text.h"

#include <fcntl.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <tuple>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>
#include <fmt/format.h>

namespace heaplab::replay {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ProgramLatency, op, samples, mean_ns, p50_ns, p90_ns, p99_ns)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PlanSummary, events, steps, ops, skipped_lost, realloc_of_lost, sizes_corrected,
                                   alignments_corrected, objects, max_id, slots, slots_retired, handoffs, sequential,
                                   new_threads, live_bytes_peak, live_bytes_end, peak_thread, peak_step,
                                   bytes_requested, cross_thread_consumes, recorded_threads, replay_threads, fold,
                                   has_times, has_live, duration_ns, memory_ops, regions, mapped_peak, recorded_touches,
                                   unknown_regions, program_latency)

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// What a plan must leave free on its file system.
constexpr uint64_t kMargin = 512 * kMiB;
// The plan file's layout version, in the names of kept plans (changed with
// plan.cpp's kPlanVersion, and with the summary kept beside it: plan
// version 8 with per-op program latency summaries is named v8; version 9
// added the arrays' checksums; v10: the same layout, with posix_memalign's
// alignments below a pointer's size corrected: a plan kept by a heaplab
// that built it otherwise is not found).
constexpr int kLayout = 10;

uint64_t free_bytes_of(const std::string& dir) {
  struct statvfs v {};
  if (statvfs(dir.c_str(), &v) != 0) return 0;
  return uint64_t(v.f_bavail) * uint64_t(v.f_frsize);
}

struct Entry {
  fs::path plan;
  uint64_t bytes;
  int64_t used;  // modification time (set on each use)
};

std::vector<Entry> entries(const std::string& dir) {
  std::vector<Entry> v;
  std::error_code ec;
  const int64_t now = int64_t(time(nullptr));
  for (const auto& d : fs::directory_iterator(dir, ec)) {
    struct stat st {};
    if (lstat(d.path().c_str(), &st) != 0) continue;
    // Plans being written are named NAME.tmp.XXXXXX (and .json): not
    // entries yet; one nobody has written to for an hour was left by a
    // command that died, and goes.
    if (d.path().filename().string().find(".tmp.") != std::string::npos) {
      std::error_code gone;
      if (now - int64_t(st.st_mtim.tv_sec) > 3600) fs::remove(d.path(), gone);
      continue;
    }
    // (Plans are files heaplab wrote: a symbolic link, a FIFO or anything
    // else so named is not one, and is left alone.)
    if (d.path().extension() != ".plan" || !S_ISREG(st.st_mode)) continue;
    v.push_back({d.path(), uint64_t(st.st_blocks) * 512, int64_t(st.st_mtim.tv_sec)});
  }
  std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  return v;
}

void remove_entry(const fs::path& plan) {
  std::error_code ec;
  fs::remove(plan, ec);
  fs::path json = plan;
  json.replace_extension(".json");
  fs::remove(json, ec);
}

// Whether `fd` is the file named `path` now (not one renamed into its
// place since it was opened, nor one removed).
bool same_file(int fd, const fs::path& path) {
  struct stat a {};
  struct stat b {};
  return fstat(fd, &a) == 0 && lstat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// A command that uses a kept plan holds a shared lock on it (flock, on the
// open file: its replayers' inherited descriptors keep it) until it closes
// the plan. Removing such a plan frees its disk space only then.
enum class Use { free, in_use, gone };
// Whether `plan` is held so, asked with an exclusive lock (a few tries 1 ms
// apart: another command's find() or its own look holds one a moment); with
// `remove`, a free plan is removed while this holds the lock (a find()
// waiting for it then sees it gone). Opened for writing: an NFS client
// takes flock as a byte-range lock, whose exclusive form needs that. Where
// locks cannot be had at all, or the plan is not this user's to open, it
// is not known to be in use: free, as before there were locks. Where it
// cannot be opened for want of descriptors or memory: in use, to be safe.
Use use_of(const fs::path& plan, bool remove) {
  const int fd = open(plan.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return Use::gone;
    if (errno != EACCES && errno != EPERM && errno != EROFS) return Use::in_use;
    if (remove) remove_entry(plan);
    return Use::free;
  }
  Use use = Use::free;
  for (int tries = 1; flock(fd, LOCK_EX | LOCK_NB) != 0; ++tries) {
    if (errno != EWOULDBLOCK) break;
    if (tries == 3) {
      use = Use::in_use;
      break;
    }
    usleep(1000);
  }
  if (use == Use::free && !same_file(fd, plan)) use = Use::gone;  // removed or replaced meanwhile
  if (use == Use::free && remove) remove_entry(plan);
  close(fd);  // (and the lock with it)
  return use;
}
}  // namespace

std::string PlanStore::default_dir() {
  if (const char* d = std::getenv("HEAPLAB_PLAN_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/heaplab/plans";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/heaplab/plans";
  return "/var/tmp/heaplab-plans";
}

PlanStore::PlanStore(std::string dir) : dir_(std::move(dir)) {}

std::string PlanStore::name(const std::string& id, const PlanOptions& opt) const {
  return fmt::format("{}/{}-t{}-{}{}{}-v{}", dir_, id, opt.threads, opt.times ? "times" : "untimed",
                     opt.live ? "-live" : "", opt.reuse_slots ? "" : "-noreuse", kLayout);
}

namespace {

// Kept plans this process checked whole (PlanStore::find), as it left them
// (touched): found again with the same device, inode, size and change time,
// nothing has written them since. With `add`, `st` is added.
bool checked_here(const struct stat& st, bool add = false) {
  using Key = std::tuple<uint64_t, uint64_t, int64_t, int64_t, int64_t>;
  static std::mutex m;
  static std::set<Key> checked;
  const Key k{uint64_t(st.st_dev), uint64_t(st.st_ino), int64_t(st.st_size), int64_t(st.st_ctim.tv_sec),
              int64_t(st.st_ctim.tv_nsec)};
  std::lock_guard l(m);
  if (add) checked.insert(k);
  return checked.count(k) != 0;
}

}  // namespace

int PlanStore::find(const std::string& id, const PlanOptions& opt, PlanSummary& summary, std::string* damaged) const {
  if (id.empty()) return -1;
  const std::string base = name(id, opt);
  // The summary, bounded (a damaged or foreign file in the cache costs no
  // more than this, and is built again): a real one is a few KiB, a fold
  // of many threads a few MiB.
  nlohmann::json j;
  try {
    j = common::parse_bounded_json(common::read_input_file(base + ".json", "a kept plan's summary", 64u << 20), nullptr,
                                   64u << 20, common::kJsonMaxDepth, size_t{1} << 24);
  } catch (const std::exception&) {
    return -1;
  }
  struct stat st {};
  const int fd = open((base + ".plan").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  // In use from here until this command closes it (its last descriptor):
  // a shared lock, taken before anything is checked. Another command's
  // look at it holds an exclusive one for a moment (waited for); one that
  // removed it meanwhile leaves it unlinked: not found. (Where there are
  // no locks at all, used without one.)
  for (int tries = 1; flock(fd, LOCK_SH | LOCK_NB) != 0; ++tries) {
    if (errno != EWOULDBLOCK) break;
    if (tries == 100) {
      close(fd);
      return -1;
    }
    usleep(1000);
  }
  if (fstat(fd, &st) != 0 || !same_file(fd, base + ".plan")) {  // removed (or replaced) meanwhile
    close(fd);
    return -1;
  }
  try {
    if (!j.is_object() || j.value("plan_bytes", uint64_t{0}) != uint64_t(st.st_size) || !j.contains("head_xxh3") ||
        j["head_xxh3"] != fmt::format("{:016x}", plan_head_hash(fd)))
      throw std::runtime_error("damaged");
    summary = j.at("summary").get<PlanSummary>();
    const MappedPlan check(fd);  // its header and thread table (the pager checks the steps)
    if (check.total_steps() != summary.steps || check.slots() != summary.slots) throw std::runtime_error("damaged");
    // (Read here, before the replays: on the replayer's side it would slow
    // the first replay of the command alone. Once a process: an experiment
    // that goes from trace to trace finds the same plans again, unchanged
    // since this process checked and touched them.)
    if (!checked_here(st)) {
      if (std::string why = plan_sums_damage(fd, check); !why.empty()) {
        if (damaged) *damaged = why;
        throw std::runtime_error("damaged");
      }
    }
  } catch (const PlanMapError&) {  // (this process could not map it: left for a command that can)
    close(fd);
    return -1;
  } catch (const std::exception&) {
    // Half written or damaged: built again (and removed, unless another
    // command has put a new one in its place since it was opened).
    if (same_file(fd, base + ".plan")) remove_entry(base + ".plan");
    close(fd);
    return -1;
  }
  utimensat(AT_FDCWD, (base + ".plan").c_str(), nullptr, 0);  // used now
  if (fstat(fd, &st) == 0) checked_here(st, true);
  return fd;
}

void PlanStore::remove(const std::string& id, const PlanOptions& opt, std::pair<uint64_t, uint64_t> file) const {
  if (id.empty()) return;
  const std::string plan = name(id, opt) + ".plan";
  struct stat st {};
  if (lstat(plan.c_str(), &st) == 0 && uint64_t(st.st_dev) == file.first && uint64_t(st.st_ino) == file.second)
    remove_entry(plan);
}

std::optional<uint64_t> PlanStore::limit_set() {
  const char* l = std::getenv("HEAPLAB_PLAN_CACHE_MIB");
  if (!l || !*l) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long mib = std::strtoull(l, &end, 10);
  if (*l < '0' || *l > '9' || *end != '\0' || errno != 0 || mib > (UINT64_MAX >> 20))
    throw PlanError(std::string("HEAPLAB_PLAN_CACHE_MIB: expected the MiB of kept plans as a whole number (0: keep "
                                "none), not '") +
                    l + "'");
  return uint64_t(mib) * kMiB;
}

uint64_t PlanStore::cache_limit() const {
  if (const std::optional<uint64_t> set = limit_set()) return *set;
  uint64_t kept = 0;
  for (const Entry& e : entries(dir_)) kept += e.bytes;
  return std::min<uint64_t>(64 * kGiB, (free_bytes_of(dir_) + kept) / 2);
}

bool PlanStore::make_room(uint64_t need, uint64_t limit) const {
  std::vector<Entry> v = entries(dir_);
  uint64_t kept = 0;
  for (const Entry& e : v) kept += e.bytes;
  if (need > limit) return false;
  for (const Entry& e : v) {
    if (kept + need <= limit) break;
    remove_entry(e.plan);
    kept -= e.bytes;
  }
  return kept + need <= limit;
}

int PlanStore::build(const trace::TraceReader& r, const PlanOptions& opt, const std::string& id, PlanSummary& summary,
                     bool& kept, std::string& where) const {
  kept = false;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (access(dir_.c_str(), W_OK) != 0) {
    const std::string why = dir_ + " cannot be written: " + std::strerror(errno);
    const uint64_t need = plan_bytes_at_most(r, opt), available = trace::memory_available();
    if (available != 0 && need > available)
      throw PlanError(
          fmt::format("the replay plan needs {}, held in memory since {}, and this machine has {} available (set "
                      "HEAPLAB_PLAN_DIR to a file system with room for it)",
                      common::gib_text(need), why, common::gib_text(available)));
    where = "memory (" + why + ")";
    return build_plan(r, opt, summary);
  }
  const uint64_t need = plan_bytes(r, opt);
  // Whether the plan will be kept: older plans make room for it under the
  // cache's limit only once it is built (a build stopped midway, where the
  // trace's live heap passes what this machine has, or by a bad trace,
  // takes no kept plan with it).
  const uint64_t limit = cache_limit();
  bool keep = !id.empty() && need <= limit;
  uint64_t free_bytes = free_bytes_of(dir_);
  // Kept plans may have to go first to make room on the disk for the build
  // (least recently used first), but only where they can: a plan another
  // command has open frees its space only when that command closes it, so
  // it stays and counts for nothing; and where the free space and the
  // other kept plans together are too little, none goes for a build that
  // is refused all the same.
  std::vector<Entry> kept_plans = entries(dir_);
  std::vector<Use> use(kept_plans.size());
  uint64_t kept_bytes = 0, open_bytes = 0;
  for (size_t i = 0; i < kept_plans.size(); ++i) {
    use[i] = use_of(kept_plans[i].plan, false);
    if (use[i] != Use::gone) kept_bytes += kept_plans[i].bytes;
    if (use[i] == Use::in_use) open_bytes += kept_plans[i].bytes;
  }
  if (free_bytes + kept_bytes - open_bytes >= need + kMargin)
    for (size_t i = 0; i < kept_plans.size() && free_bytes < need + kMargin; ++i) {
      if (use[i] == Use::gone) continue;
      // (The sums follow what this second look finds: a plan in use a
      // moment ago may have been closed since, or one free then opened.)
      const Use now = use_of(kept_plans[i].plan, true);
      if (now == Use::in_use) {
        if (use[i] != Use::in_use) open_bytes += kept_plans[i].bytes;
      } else {  // removed now, or by another command
        kept_bytes -= kept_plans[i].bytes;
        if (use[i] == Use::in_use) open_bytes -= kept_plans[i].bytes;
        free_bytes = free_bytes_of(dir_);
      }
      use[i] = now == Use::in_use ? now : Use::gone;
    }
  if (free_bytes < need + kMargin) {
    // Too little room on the disk: in memory, for this command only, as
    // where the directory cannot be written, if the plan takes at most half
    // of the memory available (the replay's heap needs the rest).
    std::string left;
    if (kept_bytes != 0) left = ", and " + common::size_text(kept_bytes) + " in kept plans, which are left";
    if (open_bytes != 0) left += " (" + common::size_text(open_bytes) + " of them in use)";
    const uint64_t available = trace::memory_available();
    if (available != 0 && need <= available / 2) {
      where = fmt::format("memory ({} has {} free{}; the plan needs {} and {} left free beside it)", dir_,
                          common::size_text(free_bytes), left, common::size_text(need), common::size_text(kMargin));
      return build_plan(r, opt, summary);
    }
    throw PlanError(fmt::format(
        "the replay plan needs {} on disk and {} left free beside it, and {} has {} free{}; held in memory instead "
        "it would take more than half of the {} available (set HEAPLAB_PLAN_DIR to a file system with more room, "
        "or replay a shorter trace)",
        common::size_text(need), common::size_text(kMargin), dir_, common::size_text(free_bytes), left,
        common::size_text(available)));
  }
  const std::string base = name(id, opt);
  std::string tmp = base + ".tmp.XXXXXX";
  not_kept_.clear();
  int fd = keep ? mkostemp(tmp.data(), O_CLOEXEC) : -1;
  if (keep && fd < 0) not_kept_ = std::string("cannot create a file in ") + dir_ + ": " + std::strerror(errno);
  if (fd >= 0) flock(fd, LOCK_SH | LOCK_NB);  // in use by this command once named (find())
  if (fd < 0) {
    keep = false;
    fd = open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) {  // a file system without O_TMPFILE: a named file, unlinked at once
    std::string t = dir_ + "/plan.XXXXXX";
    fd = mkostemp(t.data(), O_CLOEXEC);
    if (fd >= 0) unlink(t.c_str());
  }
  if (fd < 0) throw PlanError("creating the replay plan in " + dir_ + ": " + std::strerror(errno));
  try {
    PlanOptions o = opt;
    o.writeback = keep;  // synced before it is named
    fd = build_plan(r, o, summary, fd);
  } catch (...) {
    if (keep) fs::remove(tmp, ec);
    throw;
  }
  where = dir_;
  // (Its room on the disk as built, not the estimate that chose to keep it.)
  struct stat built {};
  const uint64_t bytes = fstat(fd, &built) == 0 ? uint64_t(built.st_blocks) * 512 : need;
  if (keep && (bytes > limit || !make_room(bytes, limit))) {
    fs::remove(tmp, ec);
    keep = false;
  }
  if (!keep) return fd;
  nlohmann::json j;
  try {
    j = {{"trace_id", id},
         {"plan_bytes", uint64_t(built.st_size)},
         {"head_xxh3", fmt::format("{:016x}", plan_head_hash(fd))},
         {"summary", summary}};
  } catch (const PlanError& e) {
    not_kept_ = e.what();
    fs::remove(tmp, ec);
    return fd;
  }
  {
    std::ofstream out(tmp + ".json");
    out << j.dump() << "\n";
    out.flush();
    // On disk before it is named: a plan found after a crash of the
    // machine is whole, never a file of the right size full of zeros.
    errno = 0;
    if (!out || fdatasync(fd) != 0) {
      not_kept_ = "cannot write it to " + dir_ + (errno != 0 ? std::string(": ") + std::strerror(errno) : "");
      fs::remove(tmp + ".json", ec);
      fs::remove(tmp, ec);
      return fd;  // not kept; this command still has it
    }
  }
  // Renamed into place, summary first, so that a plan found always has
  // its summary.
  fs::rename(tmp + ".json", base + ".json", ec);
  const bool summary_named = !ec;
  if (!ec) fs::rename(tmp, base + ".plan", ec);
  if (ec) {
    not_kept_ = "cannot name it in " + dir_ + ": " + ec.message();
    fs::remove(summary_named ? base + ".json" : tmp + ".json", ec);  // (no summary without its plan)
    fs::remove(tmp, ec);
    return fd;
  }
  kept = true;
  return fd;
}

}  // namespace heaplab::replay
