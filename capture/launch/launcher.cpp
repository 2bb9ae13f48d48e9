#include "capture/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <elf.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "allocators/library.h"
#include "capture/launch/method.h"
#include "capture/pt/pt_import.h"
#include "common/files.h"
#include "common/process.h"
#include "common/text.h"

namespace heaplab::launch {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what) { throw LaunchError(what); }

std::string errstr(int e) { return std::strerror(e); }

ClockPair clock_pair() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ClockPair p;
  p.mono = uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
#if defined(__x86_64__)
  p.ticks = __rdtsc();
#endif
  return p;
}

std::vector<RawName> list_raw(const std::string& dir, const char* ext) {
  std::vector<RawName> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    unsigned pid = 0, gen = 0;
    char tail[16] = {0};
    if (std::sscanf(name.c_str(), "%u.%u.%15s", &pid, &gen, tail) == 3 && std::string(tail) == ext)
      out.push_back({e.path().string(), pid, gen});
  }
  return out;
}

// Removes the raw files of this capture (and the directory, if heaplab made
// it); never anything else a user's --raw-dir holds.
void remove_raw(const CaptureOptions& opt) {
  std::error_code ec;
  for (const RawName& r : list_raw(opt.raw_dir)) {
    fs::remove(r.path, ec);
    fs::remove(r.path + ".blocks", ec);
  }
  fs::remove(opt.raw_dir + "/unfollowed", ec);
  if (opt.method == "pt") {  // the recording, the shim's markers, perf script's messages, decoded blocks
    fs::remove(opt.raw_dir + "/perf.data", ec);
    fs::remove(opt.raw_dir + "/perf.data.old", ec);
    fs::remove(opt.raw_dir + "/perf-script.stderr", ec);
    for (const RawName& m : list_raw(opt.raw_dir, "ptw")) {
      fs::remove(m.path, ec);
      fs::remove(opt.raw_dir + "/" + std::to_string(m.pid) + ".0.hlraw.blocks", ec);  // a failed decode's
    }
  }
  if (opt.raw_dir_created) fs::remove(opt.raw_dir, ec);  // only if now empty
}

std::string trace_name(const std::string& output, uint32_t pid, uint32_t gen, bool root,
                       const std::vector<std::string>& argv) {
  if (root) return output;
  fs::path p(output);
  std::string stem = p.extension() == ".hlt" ? p.stem().string() : p.filename().string();
  // The program's name as a file name can hold it: letters, digits, '.', '_', '+', '-'.
  std::string prog;
  if (!argv.empty())
    for (char c : fs::path(argv[0]).filename().string())
      if (prog.size() < 40) prog += std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._+-", c) ? c : '_';
  while (!prog.empty() && prog.front() == '.') prog.erase(0, 1);
  std::string name = stem + (prog.empty() ? "" : "." + prog) + "." + std::to_string(pid) +
                     (gen ? "-" + std::to_string(gen) : "") + ".hlt";
  return (p.parent_path() / name).string();
}

std::vector<UnfollowedImage> read_unfollowed(const std::string& raw_dir) {
  std::vector<UnfollowedImage> out;
  std::ifstream in(raw_dir + "/unfollowed");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    for (size_t at = 0;;) {
      const size_t tab = line.find('\t', at);
      f.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
      if (tab == std::string::npos) break;
      at = tab + 1;
    }
    // Only lines written whole (ending in "."): a line cut by a full disk
    // was counted in the spare headers instead.
    if (f.size() < 4 || f.back() != "." || (f[0] != "exec" && f[0] != "fork")) continue;
    f.pop_back();
    UnfollowedImage u;
    u.kind = f[0];
    u.pid = uint32_t(std::strtoul(f[1].c_str(), nullptr, 10));
    u.ppid = uint32_t(std::strtoul(f[2].c_str(), nullptr, 10));
    if (f.size() > 3) u.exe = f[3];
    if (f.size() > 4) u.command_line = f[4];
    while (!u.command_line.empty() && u.command_line.back() == ' ') u.command_line.pop_back();
    out.push_back(std::move(u));
  }
  return out;
}

nlohmann::json capture_metadata(const CaptureOptions& opt, const CaptureResult& res, bool root,
                                const nlohmann::json& meta) {
  nlohmann::json m = opt.normalise.capture_metadata;
  m["allocator"] =
      opt.allocator.empty() || opt.glibc_forwarder ? nlohmann::json("glibc") : nlohmann::json(opt.allocator);
  if (root) {
    m["exit_code"] = res.exit_code;
    if (res.signal) m["signal"] = res.signal;
    if (res.anon_rss_peak_kib) m["anon_rss_peak_kib"] = res.anon_rss_peak_kib;
    m["wall_ns"] = uint64_t(res.wall_seconds * 1e9);
  }
  m.update(meta);
  return m;
}

void label_allocator(nlohmann::json& m, const CaptureOptions& opt, const raw::FileHeader& h) {
  const std::string exe(h.exe, std::min<size_t>(h.exe_len, sizeof h.exe));
  const std::optional<allocators::ProgramAllocator> pa = allocators::program_allocator(exe);
  if (opt.glibc_forwarder)
    m["allocator"] = "glibc";
  else if (!opt.allocator.empty())
    m["allocator"] = opt.allocator;
  else if (pa)
    m["allocator"] = pa->name;  // what the image brings answered its malloc
  else
    m["allocator"] = "glibc";
  if (pa)
    m["program_allocator"] = {{"name", pa->name}, {"library", pa->library}, {"own_api", pa->own_api}};
  else
    m.erase("program_allocator");
}

TraceResult normalise_to(normalise::RawFile& raw, const std::string& out, const CaptureOptions& opt,
                         const CaptureResult& res, bool root, const nlohmann::json& meta) {
  normalise::NormaliseOptions nopt = opt.normalise;
  nopt.capture_metadata = capture_metadata(opt, res, root, meta);
  label_allocator(nopt.capture_metadata, opt, raw.header());
  TraceResult tr;
  common::write_then_rename(out, [&](const std::string& tmp) { tr.report = normalise::normalise(raw, tmp, nopt); });
  tr.path = out;
  return tr;
}

namespace {

// execvp's search, done up front so that a missing program is reported
// before anything runs.
std::string resolve_program(const std::string& name) {
  auto check = [&](const std::string& path) -> int {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (access(path.c_str(), X_OK) != 0) return errno;
    return 0;
  };
  if (name.empty()) fail("no program given (heaplab capture [options] -- PROGRAM [ARGS...])");
  if (name.find('/') != std::string::npos) {
    if (int e = check(name)) fail("cannot run '" + name + "': " + errstr(e));
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (check(cand) == 0) return cand;
    start = end + 1;
  }
  fail("program '" + name + "' not found in PATH");
}

// A statically linked program ignores LD_PRELOAD: nothing would be captured.
bool statically_linked(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  Elf64_Ehdr eh;
  if (!f.read(reinterpret_cast<char*>(&eh), sizeof eh)) return false;
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return false;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    f.seekg(std::streamoff(eh.e_phoff + uint64_t(i) * eh.e_phentsize));
    if (!f.read(reinterpret_cast<char*>(&ph), sizeof ph)) return false;
    if (ph.p_type == PT_INTERP) return false;  // static-pie has PT_DYNAMIC but no interpreter
  }
  return true;
}

void check_writable_output(const std::string& out) {
  if (out.empty()) fail("no output file given (-o FILE.hlt)");
  if (std::string why = common::output_problem(out); !why.empty())
    fail("cannot write output " + why.substr(std::string("cannot write ").size()));
}

// Samples a process's anonymous RSS (/proc/PID/status, RssAnon) every 2 ms
// on a thread of its own, from construction to stop(): its peak is what
// the trace should explain.
class RssSampler {
 public:
  explicit RssSampler(pid_t pid) : path_("/proc/" + std::to_string(pid) + "/status"), thread_([this] { run(); }) {}
  ~RssSampler() { stop(); }
  uint64_t stop() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
    return peak_;
  }

 private:
  void run() {
    char buf[4096];
    while (!done_.load()) {
      int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        ssize_t n = ::read(fd, buf, sizeof buf - 1);
        ::close(fd);
        if (n > 0) {
          buf[n] = 0;
          if (const char* p = std::strstr(buf, "RssAnon:"))
            peak_ = std::max<uint64_t>(peak_, std::strtoull(p + 8, nullptr, 10));
        }
      }
      timespec ts{0, 2000000};
      nanosleep(&ts, nullptr);
    }
  }
  std::string path_;
  std::atomic<bool> done_{false};
  uint64_t peak_ = 0;
  std::thread thread_;
};

pid_t g_child = 0;
volatile sig_atomic_t g_interrupted = 0;
void forward_signal(int sig) {
  if (g_child > 0) kill(g_child, sig);
}
void note_interrupt(int) { g_interrupted = 1; }

// With children followed, heaplab is their subreaper: after the program
// exits, wait for its remaining descendants (their captures are still being
// written) until they have all exited, or Ctrl-C, SIGTERM or SIGHUP. Returns
// true if some were still running when the wait was cut short.
bool wait_descendants() {
  struct sigaction stop {
  }, old_int{}, old_term{}, old_hup{};
  stop.sa_handler = note_interrupt;  // no SA_RESTART: waitpid returns EINTR
  sigaction(SIGINT, &stop, &old_int);
  sigaction(SIGTERM, &stop, &old_term);
  sigaction(SIGHUP, &stop, &old_hup);
  while (!g_interrupted) {
    if (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) continue;  // EINTR: see whether interrupted
    break;                                                          // ECHILD: none left
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  return waitpid(-1, nullptr, WNOHANG) == 0;  // 0: children exist, none exited
}

}  // namespace

std::unique_ptr<CaptureMethod> choose_method(CaptureOptions& opt, CaptureResult& res) {
  if (opt.method != "software" && opt.method != "pt") fail("--method: software or pt, not '" + opt.method + "'");
  if (opt.method == "pt") {
    // Before anything runs: what the machine lacks, in one line.
    if (std::string bad = pt::check_record_options(opt.pt); !bad.empty()) fail(bad);
    pt::Decoder dec;
    if (!pt::parse_decoder(opt.pt_decoder, &dec))
      fail("--pt-decoder: direct, dlfilter or text, not '" + opt.pt_decoder + "'");
    if (opt.pt_fallback != "refuse" && opt.pt_fallback != "software")
      fail("--pt-fallback: refuse or software, not '" + opt.pt_fallback + "'");
    if (opt.follow_exec)
      fail("--method pt cannot follow exec yet (the images of a process share its trace); use --method software");
    if (std::string missing = pt::pt_missing(opt.pt.perf); !missing.empty()) {
      if (opt.pt_fallback != "software")
        fail("--method pt: " + missing + "; use --method software (or --pt-fallback software)");
      res.notes.push_back("--method pt: " + missing + "; recorded with --method software instead");
      opt.method = "software";
    }
  }
  return opt.method == "pt" ? pt_method() : software_method();
}

void validate(CaptureOptions& opt) {
  if (opt.argv.empty()) fail("no program given (heaplab capture [options] -- PROGRAM [ARGS...])");
  std::string prog = resolve_program(opt.argv[0]);
  if (statically_linked(prog)) fail("'" + prog + "' is statically linked: LD_PRELOAD cannot capture it");
  if (opt.clock != "auto" && opt.clock != "tsc" && opt.clock != "monotonic")
    fail("unknown clock '" + opt.clock + "' (auto, tsc or monotonic)");
  if (opt.shim.empty()) {
    const char* env = std::getenv("HEAPLAB_SHIM");
    opt.shim = env && *env ? env : common::self_dir() + "/libheaplab_capture.so";
  }
  if (access(opt.shim.c_str(), R_OK) != 0)
    fail("capture shim '" + opt.shim + "' not found: " + errstr(errno) + " (build heaplab, or set HEAPLAB_SHIM)");
  opt.shim = fs::absolute(opt.shim).string();
  std::string err;
  const bool asked_glibc = opt.allocator == "glibc";
  auto lib = allocators::resolve_allocator(opt.allocator, err);
  if (!lib) fail(err);
  opt.allocator = lib->path;  // empty for glibc
  // A program linked against an allocator runs on it unless another is
  // preloaded; asked for glibc, it gets a forwarder to glibc's own malloc.
  opt.program_allocator = allocators::program_allocator(prog);
  opt.glibc_forwarder = false;
  // Another allocator answering malloc while the program hands blocks to
  // its own allocator's functions (sdallocx of a glibc block) would crash it.
  if (const auto& pa = opt.program_allocator;
      pa && !pa->library.empty() && !pa->block_api.empty() && (asked_glibc || !opt.allocator.empty())) {
    std::string api;
    for (size_t i = 0; i < pa->block_api.size() && i < 4; ++i) api += (i ? ", " : "") + pa->block_api[i];
    if (pa->block_api.size() > 4) api += fmt::format(" and {} more", pa->block_api.size() - 4);
    fail("'" + prog + "' calls " + pa->name + "'s own " + api +
         ", which take or return heap blocks: on another allocator those would mix two allocators' blocks; "
         "capture it without --allocator (on " +
         pa->name + ")");
  }
  // (Also when following execs: an exec'd program may be linked against one.)
  if (asked_glibc && ((opt.program_allocator && !opt.program_allocator->library.empty()) || opt.follow_exec)) {
    const std::string fwd = (fs::path(opt.shim).parent_path() / "libheaplab_glibc.so").string();
    if (access(fwd.c_str(), R_OK) != 0)
      fail("--allocator glibc needs " + fwd + " to run programs linked against another allocator on glibc's malloc: " +
           errstr(errno) + " (build heaplab)");
    opt.allocator = fwd;
    opt.glibc_forwarder = true;
  }
  check_writable_output(opt.output);
  if (std::string why = common::output_is_input(opt.output, {prog}); !why.empty())
    fail("output " + why.substr(0, why.find(": it would")) +
         " (the program): it would be replaced (name another output)");
  if (opt.raw_dir.empty()) opt.raw_dir = opt.output + ".raw." + std::to_string(getpid());
  opt.raw_dir_created = mkdir(opt.raw_dir.c_str(), 0755) == 0;
  if (!opt.raw_dir_created) {
    if (errno != EEXIST) fail("cannot create raw directory '" + opt.raw_dir + "': " + errstr(errno));
    std::error_code ec;
    if (!fs::is_directory(opt.raw_dir, ec)) fail("raw directory '" + opt.raw_dir + "' is not a directory");
    if (!list_raw(opt.raw_dir).empty())
      fail("raw directory '" + opt.raw_dir + "' already holds a capture (.hlraw files)");
    if (!list_raw(opt.raw_dir, "ptw").empty() || fs::exists(opt.raw_dir + "/perf.data", ec))
      fail("raw directory '" + opt.raw_dir + "' already holds a capture (.ptw markers or perf.data)");
  }
  opt.raw_dir = fs::absolute(opt.raw_dir).string();
  opt.argv[0] = prog;
}

namespace {

// Raw directories that captures of the same output left behind when their
// heaplab was killed (OUTPUT.raw.PID, PID gone, raw files inside): named,
// with the command that recovers their trace, so that they are neither
// lost nor left to fill the disk unnoticed. At most 5.
std::vector<std::string> leftover_raw_dirs(const std::string& output, const std::string& mine) {
  std::vector<std::string> notes;
  std::error_code ec;
  const fs::path out = fs::absolute(output, ec);
  if (ec) return notes;
  const std::string prefix = out.filename().string() + ".raw.";
  for (fs::directory_iterator it(out.parent_path(), ec), end; !ec && it != end && notes.size() < 5; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long long n = std::stoll(digits);
    if (n <= 0 || n > 0x7fffffff) continue;
    const pid_t pid = pid_t(n);
    if (it->path() == fs::path(mine) || !it->is_directory(ec) || kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::vector<RawName> raws;
    try {
      raws = list_raw(it->path().string());
    } catch (const std::exception&) {
      continue;
    }
    if (raws.empty()) continue;
    std::sort(raws.begin(), raws.end(), [](const RawName& a, const RawName& b) { return a.path < b.path; });
    notes.push_back(fmt::format(
        "note: {} holds the raw files of an earlier capture of {} whose heaplab was killed: `heaplab import --from "
        "heaplab-raw {} -o TRACE` recovers its trace; remove the directory otherwise",
        it->path().string(), output, raws.front().path));
  }
  return notes;
}

}  // namespace

CaptureResult run_capture(CaptureOptions opt) {
  std::string given = opt.argv.empty() ? "" : opt.argv[0];
  CaptureResult res;
  const std::unique_ptr<CaptureMethod> method = choose_method(opt, res);
  opt.method = res.method = method->name();
  validate(opt);
  for (std::string& n : leftover_raw_dirs(opt.output, opt.raw_dir)) res.notes.push_back(std::move(n));
  res.raw_dir = opt.raw_dir;
  if (const auto& pa = opt.program_allocator) {
    const std::string prog = fs::path(opt.argv[0]).filename().string();
    std::string api;
    for (size_t i = 0; i < pa->own_api.size() && i < 5; ++i) api += (i ? ", " : "") + pa->own_api[i];
    if (pa->own_api.size() > 5) api += fmt::format(" and {} more", pa->own_api.size() - 5);
    const std::string own =
        api.empty() ? "" : "; its calls of " + pa->name + "'s own statistics functions (" + api + ") still reach it";
    if (pa->library.empty())
      res.notes.push_back(prog +
                          " defines malloc itself (an allocator linked in): its allocator's calls never reach the "
                          "shim, so the trace holds only calls that bypass it");
    else if (opt.glibc_forwarder)
      res.notes.push_back(prog + " is linked against " + pa->name + " (" + pa->library +
                          "): --allocator glibc ran it on glibc's malloc (heaplab's forwarder, libheaplab_glibc.so, "
                          "preloaded)" +
                          own);
    else if (opt.allocator.empty())
      res.notes.push_back(prog + " is linked against " + pa->name + " (" + pa->library +
                          "): it ran, and was captured, on " + pa->name +
                          "; --allocator glibc runs it on glibc's malloc");
    else
      res.notes.push_back(prog + " is linked against " + pa->name + " (" + pa->library +
                          "); the preloaded allocator "
                          "answered its malloc instead" +
                          own);
  }

  std::string preload = opt.shim;
  if (!opt.allocator.empty()) preload += ":" + opt.allocator;
  if (const char* old = std::getenv("LD_PRELOAD"); old && *old) preload += std::string(":") + old;
  process::Spec spec;
  spec.env = {{"HEAPLAB_CAPTURE_DIR", opt.raw_dir},
              {"HEAPLAB_CAPTURE_FOLLOW", std::string(opt.follow_fork ? "fork," : "") + (opt.follow_exec ? "exec" : "")},
              {"HEAPLAB_CAPTURE_CLOCK", opt.clock},
              {"HEAPLAB_CAPTURE_LAUNCHER", std::to_string(getpid())}};
  if (opt.latency) spec.env.emplace_back("HEAPLAB_CAPTURE_LATENCY", std::to_string(opt.latency));
  method->command(opt, res, preload, spec);
  bool following = opt.follow_fork || opt.follow_exec;
  if (following) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  RunInfo run;
  run.start = clock_pair();
  run.t0 = std::chrono::steady_clock::now();
  // Ctrl-C reaches the program (the terminal sends it to both); heaplab
  // ignores it and keeps the trace. SIGTERM and SIGHUP are passed on.
  struct sigaction ign {
  }, fwd{}, old_int{}, old_quit{}, old_term{}, old_hup{};
  ign.sa_handler = SIG_IGN;
  fwd.sa_handler = forward_signal;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  sigaction(SIGTERM, &fwd, &old_term);
  sigaction(SIGHUP, &fwd, &old_hup);
  // The program gets each as it would have without heaplab: ignored if it
  // was ignored when heaplab started (nohup), else the default.
  for (const auto& [sig, old] :
       {std::pair{SIGINT, &old_int}, {SIGQUIT, &old_quit}, {SIGTERM, &old_term}, {SIGHUP, &old_hup}})
    (old->sa_handler == SIG_IGN ? spec.ignore_signals : spec.default_signals).push_back(sig);
  // SIGTERM and SIGHUP wait (blocked) until the program's pid is known, so
  // that none is lost while it starts; the child unblocks them.
  sigset_t forwarded, old_mask;
  sigemptyset(&forwarded);
  sigaddset(&forwarded, SIGTERM);
  sigaddset(&forwarded, SIGHUP);
  sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
  for (int sig : {SIGTERM, SIGHUP})
    if (!sigismember(&old_mask, sig)) spec.unblock_signals.push_back(sig);  // blocked at entry: stays so
  auto restore_signals = [&] {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
  };
  int status = 0;
  try {
    process::Child child = process::spawn(spec);
    run.pid = child.pid();
    g_child = run.pid;
    method->started(opt, run);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);  // a SIGTERM that came meanwhile is forwarded now
    // The program's anonymous RSS (on the PT route the child is perf, whose
    // memory says nothing of the program's: no coverage there).
    std::optional<RssSampler> rss;
    if (opt.method == "software") rss.emplace(run.pid);
    status = child.wait();
    if (rss) res.anon_rss_peak_kib = rss->stop();
    g_child = 0;
  } catch (const process::SpawnError& e) {
    g_child = 0;
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    restore_signals();
    if (following) prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    remove_raw(opt);
    if (!e.exec_failed()) fail(e.what());
    const std::string prog = method->starts(opt, given);
    fail("cannot run '" + prog + "': " + process::SpawnError::why_not_run(prog, e.err()));
  }
  res.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.t0).count();
  if (following) {
    g_interrupted = 0;
    res.descendants_running = wait_descendants();
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  }
  restore_signals();
  if (WIFSIGNALED(status)) {
    res.signal = WTERMSIG(status);
    res.exit_code = 128 + res.signal;
  } else {
    res.exit_code = WEXITSTATUS(status);
  }
  method->collect(opt, res, run);
  if (opt.method == "software") res.pid = uint32_t(run.pid);
  res.unfollowed = read_unfollowed(opt.raw_dir);
  res.raw_kept = opt.keep_raw || !res.failed.empty();
  if (!res.raw_kept) remove_raw(opt);
  return res;
}

std::string summary(const CaptureResult& r, const CaptureOptions& opt) {
  std::string s;
  auto line = [&](const std::string& l) { s += "heaplab capture: " + l + "\n"; };
  std::string prog = opt.argv.empty() ? "program" : fs::path(opt.argv[0]).filename().string();
  if (r.signal)
    line(fmt::format("{} was killed by signal {} ({}) after {:.3f} s; the trace holds every event up to then", prog,
                     r.signal, sigabbrev_np(r.signal) ? sigabbrev_np(r.signal) : "?", r.wall_seconds));
  else
    line(fmt::format("{} exited with status {} after {:.3f} s", prog, r.exit_code, r.wall_seconds));
  for (const std::string& n : r.notes) line(n);
  if (r.traces.empty() && r.failed.empty())
    line("no events were captured (the program never allocated, or it cleared LD_PRELOAD)");
  for (const TraceResult& t : r.traces) {
    const auto& rep = t.report;
    double bpe = rep.events ? double(rep.bytes) / double(rep.events) : 0;
    line(fmt::format(
        "{}: {} calls in {} thread{}, {} objects ({} live at end), {} bytes = {:.2f} bytes/event{}", t.path,
        common::group_digits(rep.calls), common::group_digits(rep.threads), rep.threads == 1 ? "" : "s",
        common::group_digits(rep.objects), common::group_digits(rep.live_at_end), common::group_digits(rep.bytes), bpe,
        &t == &r.traces.front() && t.exec_generation == 0
            ? ""
            : fmt::format(" ({}pid {}{})",
                          t.command_line.empty() ? "" : fs::path(t.command_line[0]).filename().string() + ", ", t.pid,
                          t.exec_generation ? fmt::format(", exec #{}", t.exec_generation) : "")));
    std::string notes;
    auto note = [&](uint64_t n, const std::string& what) {
      if (n) notes += (notes.empty() ? "" : "; ") + common::group_digits(n) + " " + what;
    };
    note(rep.unknown_frees, "frees of memory allocated before capture (skipped)");
    note(rep.unknown_reallocs, "reallocs of such memory (as realloc(NULL, n))");
    note(rep.reused_live, "allocations at a still-live address");
    note(rep.holes - rep.dropped_calls, "lost records");  // (the dropped calls have a line of their own)
    note(rep.unfinished_reallocs, "unfinished reallocs");
    note(rep.blocks_missing, "blocks claimed but never written");
    note(rep.bad_records, "unreadable records");
    note(rep.late,
         "records read after later ones were written (the live reader missed them: their order with "
         "other threads' calls may be wrong)");
    note(rep.latency_samples_dropped,
         "timed calls thinned out (at most 16 Mi are kept, evenly over the run: a larger --latency N keeps more of "
         "them)");
    if (!notes.empty()) line("  " + notes);
    const std::string why = rep.stop_error > 0 ? fmt::format(" ({})", std::strerror(int(rep.stop_error))) : "";
    const bool never_started = rep.dropped_calls && rep.calls == 0 && rep.records == 0;
    if (never_started)
      line(
          fmt::format("  capture could not start{}: all {} heap calls are missing from the trace (a `lost` event "
                      "counts them)",
                      why, common::group_digits(rep.dropped_calls)));
    else if (rep.dropped_calls)
      line(
          fmt::format("  capture stopped{}: {} calls made after it are missing from the trace (a `lost` event says so)",
                      why, common::group_digits(rep.dropped_calls)));
    if (rep.memory_calls)
      line(fmt::format("  {} calls of the program's own memory ({} mappings, peak {:.1f} MiB mapped)",
                       common::group_digits(rep.memory_calls), common::group_digits(rep.regions),
                       double(rep.mapped_peak) / 1048576.0));
    // (Timed calls and resident counts make memory records too, without a
    // memory call.)
    if (rep.memory_scratch_peak)
      line(fmt::format("  the program's memory records were sorted through a scratch file of at most {:.1f} MiB",
                       double(rep.memory_scratch_peak) / 1048576.0));
    if (rep.coverage >= 0 && !never_started)  // (nothing recorded: nothing to explain)
      line("  " + common::coverage_text(rep.coverage, rep.explained_peak, r.anon_rss_peak_kib));
  }
  // An image the capture followed (behind a wrapper) that hands heap blocks
  // to its own allocator's functions while another allocator answered its
  // malloc (the program itself is refused before it runs).
  if (opt.glibc_forwarder || !opt.allocator.empty())
    for (const TraceResult& t : r.traces) {
      if (&t == &r.traces.front() && t.exec_generation == 0) continue;
      const auto pa = allocators::program_allocator(t.exe);
      if (!pa || pa->library.empty() || pa->block_api.empty()) continue;
      std::string api;
      for (size_t i = 0; i < pa->block_api.size() && i < 4; ++i) api += (i ? ", " : "") + pa->block_api[i];
      line(
          fmt::format("warning: {} ({}) calls {}'s own {}, which take or return heap blocks, yet another allocator "
                      "answered its malloc: it mixed two allocators' blocks, and its trace lacks those calls",
                      t.path, fs::path(t.exe).filename().string(), pa->name, api));
    }
  if (r.traces.size() > 1) {
    uint64_t all = 0;
    const TraceResult* most = &r.traces.front();
    for (const TraceResult& t : r.traces) {
      all += t.report.calls;
      if (t.report.calls > most->report.calls) most = &t;
    }
    line(fmt::format("most calls: {} ({}{} calls, {:.0f}% of the {} traces' calls)", most->path,
                     most->command_line.empty() ? "" : fs::path(most->command_line[0]).filename().string() + ", ",
                     common::group_digits(most->report.calls),
                     all ? 100.0 * double(most->report.calls) / double(all) : 0, r.traces.size()));
  }
  // What the capture did not follow: the program exec'd into another program
  // (a wrapper script), or processes it started.
  const auto describe = [](const UnfollowedImage& u) {
    std::string d = u.exe.empty() ? std::string("an unnamed program") : u.exe;
    if (!u.command_line.empty())
      d += " (`" + (u.command_line.size() > 80 ? u.command_line.substr(0, 77) + "..." : u.command_line) + "`)";
    return d;
  };
  std::vector<const UnfollowedImage*> root_execs;
  std::vector<uint32_t> others;                                        // pids, in order
  std::map<uint32_t, std::pair<std::string, std::string>> program_of;  // pid -> (last exec'd exe, forked from)
  std::set<uint32_t> traced;  // processes with a trace (a fork child followed into its exec'd program)
  for (const TraceResult& t : r.traces) traced.insert(t.pid);
  for (const UnfollowedImage& u : r.unfollowed) {
    if (u.kind == "fork" && traced.count(u.pid)) continue;  // followed; an exec it did not follow is still said
    if (u.kind == "exec" && r.pid && u.pid == r.pid) {
      root_execs.push_back(&u);
      continue;
    }
    if (!program_of.count(u.pid)) others.push_back(u.pid);
    auto& [exe, parent] = program_of[u.pid];
    if (u.kind == "exec")
      exe = u.exe.empty() ? "?" : fs::path(u.exe).filename().string();
    else
      parent = u.exe.empty() ? "?" : fs::path(u.exe).filename().string();
  }
  if (!root_execs.empty())
    line(
        fmt::format("{} exec'd {}{}, which was not followed: its heap calls are not in the trace (it holds {}'s "
                    "before the exec); --follow-exec (or --follow) records it",
                    prog, root_execs.size() > 1 ? fmt::format("{} times, the last into ", root_execs.size()) : "",
                    describe(*root_execs.back()), prog));
  if (!others.empty()) {
    std::map<std::string, size_t> count;
    std::vector<std::string> order;
    for (uint32_t pid : others) {
      const auto& [exe, parent] = program_of[pid];
      const std::string label = !exe.empty() ? exe : "a copy of " + (parent.empty() ? std::string("?") : parent);
      if (!count[label]++) order.push_back(label);
    }
    std::string list;
    for (size_t i = 0; i < order.size() && i < 6; ++i)
      list += (list.empty() ? "" : ", ") + order[i] + (count[order[i]] > 1 ? fmt::format(" x{}", count[order[i]]) : "");
    if (order.size() > 6) list += fmt::format(", and {} other program(s)", order.size() - 6);
    line(fmt::format(
        "{} other process{} not followed ({}): {} heap calls are not in any trace; --follow records "
        "them",
        others.size(), others.size() == 1 ? " was" : "es were", list, others.size() == 1 ? "its" : "their"));
  }
  if (const uint32_t n = r.unnoted_execs + r.unnoted_forks)
    line(
        fmt::format("{} more process image{} not followed ({} exec'd, {} forked) and could not be named (no room for "
                    "the note on the raw directory's disk): {} heap calls are not in any trace; --follow records "
                    "them",
                    n, n == 1 ? " was" : "s were", r.unnoted_execs, r.unnoted_forks, n == 1 ? "its" : "their"));
  if (r.descendants_running)
    line(
        "some child processes were still running when the wait for them was interrupted; "
        "their traces hold what they had recorded by then");
  for (const std::string& f : r.failed) line(r.method == "pt" ? f : "could not normalise " + f);
  if (r.method == "pt")
    line(fmt::format("decoded and normalised in {:.3f} s{}", r.normalise_seconds,
                     r.raw_kept ? "; the recording is kept: " + r.perf_data : ""));
  else
    line(fmt::format("normalised in {:.3f} s{}", r.normalise_seconds,
                     r.raw_kept ? "; raw files kept in " + r.raw_dir : ""));
  return s;
}

}  // namespace heaplab::launch
