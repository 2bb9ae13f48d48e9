#include "replay/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "allocators/library.h"
#include "capture/format/trace_reader.h"
#include "common/files.h"
#include "common/process.h"
#include "common/text.h"
#include "replay/plan.h"

extern char** environ;

namespace heaplab::replay {

namespace fs = std::filesystem;
using common::group_digits;
using common::self_dir;

namespace {

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
    if (!lib) throw ReplayError(err);
    l.exe = dir + "/heaplab-replay";
    l.preload = lib->path;
    l.library = lib->path;
  } else if (k) {
    l.exe = dir + "/" + k->replayer;
    if (!is_executable(l.exe))
      throw ReplayError("allocator '" + k->name + "': direct load is not available: " + k->replayer +
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

}  // namespace

std::string file_id(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  std::string id;
  if (fstat(fd, &st) == 0) {
    const size_t len = size_t(st.st_size);
    void* m = len ? mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    if (len == 0 || m != MAP_FAILED) {
      id = fmt::format("{:016x}", XXH3_64bits(len ? m : "", len));
      if (len) munmap(m, len);
    }
  }
  close(fd);
  return id;
}

ReplayOutcome run_replay(const ReplayOptions& opt) {
  // Settings made by hand (not through the table's parser) are checked too.
  for (const char* key : {"speed", "pin", "membind"}) {
    const SettingInfo& info = *find_setting(key);
    ReplaySettings copy = opt.settings;
    if (std::string why = set_setting(copy, info, setting_text(opt.settings, info)); !why.empty())
      throw ReplayError(std::string(info.option) + ": " + why);
  }
  if (std::string why = check_settings(opt.settings); !why.empty()) throw ReplayError(why);
  const Launch l = resolve(opt);
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
  PlanSummary plan;
  int plan_fd = -1;
  const auto plan_start = std::chrono::steady_clock::now();
  try {
    plan_fd = build_plan(
        *reader, PlanOptions{opt.settings.threads, opt.settings.timing == Timing::recorded, opt.settings.memory}, plan);
  } catch (const trace::TraceError& e) {
    throw ReplayError(e.what());
  } catch (const PlanError& e) {
    throw ReplayError(opt.trace + ": " + e.what());
  }

  const double plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - plan_start).count();
  nlohmann::json trace_j = {{"path", opt.trace},
                            {"id", file_id(opt.trace)},
                            {"events", plan.events},
                            {"calls", plan.steps},
                            {"complete", reader->complete()},
                            {"recorded_threads", plan.recorded_threads},
                            {"objects", plan.objects},
                            {"bytes_requested", plan.bytes_requested},
                            {"live_bytes_peak", plan.live_bytes_peak},
                            {"live_bytes_end", plan.live_bytes_end},
                            {"cross_thread_consumes", plan.cross_thread_consumes},
                            {"consumes_of_lost_objects_skipped", plan.skipped_lost},
                            {"reallocs_of_lost_objects", plan.realloc_of_lost}};
  if (plan.has_times || reader->has_time()) trace_j["duration_s"] = double(plan.duration_ns) / 1e9;
  if (!reader->complete()) trace_j["warning"] = reader->warning();
  reader.reset();

  std::vector<std::string> argv = {l.exe, "--plan-fd", "3", "--result-fd", "4", "--load", opt.load};
  for (std::string& a : to_args(opt.settings)) argv.push_back(std::move(a));
  argv.insert(argv.end(), l.args.begin(), l.args.end());

  // The replayer: fds 3 and 4 are the plan and the result pipe; it dies with
  // heaplab (a replay nobody reads is wasted CPU).
  process::Spec spec;
  spec.argv = std::move(argv);
  for (const auto& [k, v] : opt.env) spec.env.emplace_back(k, v);
  spec.env.emplace_back("LD_PRELOAD", l.preload.empty() ? std::nullopt : std::optional<std::string>(l.preload));
  spec.die_with_parent = true;
  spec.default_signals = {SIGXFSZ};
  std::string out;
  int status = 0;
  try {
    process::Pipe result;
    spec.fds = {{3, plan_fd}, {4, result.write}};
    process::Child child = process::spawn(spec);
    close(plan_fd);
    plan_fd = -1;
    result.close_write();
    process::read_all(result.read, out);
    status = child.wait();
  } catch (const process::SpawnError& e) {
    if (plan_fd >= 0) close(plan_fd);
    throw ReplayError(e.what());
  }

  ReplayOutcome o;
  nlohmann::json& r = o.result;
  r["format"] = "heaplab-replay-result";
  r["format_version"] = 1;
  r["trace"] = trace_j;
  r["allocator"] = {
      {"name", opt.allocator}, {"load", opt.load}, {"library", l.library}, {"settings", allocator_settings(opt.env)}};
  r["plan_build_s"] = plan_s;
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
    return o;
  }
  if (replay.is_object()) {
    for (const char* k : {"version", "build_id", "library", "emulated"})
      if (replay["allocator"].contains(k)) r["allocator"][k] = replay["allocator"][k];
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
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    exit_j = {{"status", code == 0 ? "ok" : code == 3 ? "unfaithful" : "error"}, {"code", code}};
    if (code == 127)
      o.error = "cannot run the replayer '" + l.exe + "'";
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

std::string result_summary(const nlohmann::json& r) {
  std::string s;
  const auto& t = r["trace"];
  const auto& a = r["allocator"];
  s += fmt::format("replay of {} ({} calls, {} recorded threads on {}) on {} ({}{}{})\n", t.value("path", ""),
                   group_digits(t.value("calls", uint64_t{0})), t.value("recorded_threads", 0u),
                   r.value("replay_threads", 0u), a.value("name", ""), a.value("load", ""),
                   a.contains("version") ? ", " + a["version"].get<std::string>() : "",
                   a.value("library", "").empty() ? "" : ", " + a["library"].get<std::string>());
  if (r.contains("warnings"))
    for (const auto& w : r["warnings"]) s += "  warning: " + w.get<std::string>() + "\n";
  if (!r.contains("replay")) return s;
  const auto& p = r["replay"];
  const auto& book = p["bookkeeping_bytes"];
  const double book_mib = double(book.value("plan", uint64_t{0}) + book.value("object_table", uint64_t{0})) / 1048576.0;
  s += fmt::format("  wall {:.3f} s, {:.2f} M calls/s, cpu user {:.3f} s + system {:.3f} s\n", p.value("wall_s", 0.0),
                   p.value("calls_per_s", 0.0) / 1e6, p["cpu"].value("user_s", 0.0), p["cpu"].value("system_s", 0.0));
  s += fmt::format("  max RSS {:.1f} MiB, of which {:.1f} MiB the replayer's plan and object table\n",
                   double(p.value("max_rss_kib", 0)) / 1024.0, book_mib);
  std::string ops;
  uint64_t nulls = 0, unexpected = 0;
  for (const auto& [name, o] : p["ops"].items()) {
    ops += fmt::format("{}{} {}", ops.empty() ? "" : ", ", name, group_digits(o.value("calls", uint64_t{0})));
    nulls += o.value("null_results", uint64_t{0});
    unexpected += o.value("unexpected_results", uint64_t{0});
  }
  s += fmt::format("  calls {}: {}\n", p.value("calls_match", false) ? "exactly as recorded" : "DIFFER from the trace",
                   ops);
  if (!p.value("results_match", true))
    s += fmt::format(
        "  results differ from the trace: {} NULL where it had a result, {} results where it had NULL, "
        "{} failed reallocs that moved here\n",
        group_digits(nulls), group_digits(unexpected), group_digits(p.value("moved_failed_reallocs", uint64_t{0})));
  const auto& w = p["cross_thread_waits"];
  if (w.value("count", uint64_t{0}) != 0)
    s += fmt::format("  cross-thread waits: {} ({:.3f} ms in all threads)\n",
                     group_digits(w.value("count", uint64_t{0})), double(w.value("total_ns", uint64_t{0})) / 1e6);
  s += fmt::format("  live requested bytes peak (trace order): {}\n",
                   group_digits(t.value("live_bytes_peak", uint64_t{0})));
  if (p.contains("memory") && p["memory"].contains("fragmentation")) {
    const auto& m = p["memory"];
    const auto mib = [](uint64_t kib) { return double(kib) / 1024.0; };
    s += fmt::format("  heap RSS: peak {:.1f} MiB, final {:.1f} MiB; {} samples every {} ms\n",
                     mib(m.value("heap_peak_kib", uint64_t{0})), mib(m.value("heap_final_kib", uint64_t{0})),
                     m.value("samples", 0), m.value("interval_ms", 0.0));
    // At the end only where a good part of the peak is still live (else a
    // ratio of a few bytes).
    std::string final_frag;
    const auto& tl = m["timeline"]["live_bytes"];
    if (!tl.empty() && 4 * tl.back().get<int64_t>() >= m.value("live_bytes_peak_sampled", int64_t{0}))
      final_frag = fmt::format(", at the end {:.2f}", m["fragmentation"].value("final", 0.0));
    if (m.value("live_peak_sampled_fraction", 0.0) >= 0.5)
      s += fmt::format(
          "  at the live peak ({:.1f} MiB live, {}) heap RSS {:.1f} MiB: fragmentation {:.2f} "
          "(time-weighted {:.2f}{})\n",
          double(m.value("live_bytes_peak_sampled", int64_t{0})) / 1048576.0,
          m.value("at_live_peak_source", "") == "periodic sample" ? "sampled" : "snapshot",
          mib(m.value("heap_kib_at_live_peak", uint64_t{0})), m["fragmentation"].value("at_live_peak", 0.0),
          m["fragmentation"].value("time_weighted", 0.0), final_frag);
    else
      s += fmt::format(
          "  fragmentation: not measured: the samples saw {:.0f}% of the live peak (the replay is short "
          "against --sample-ms; try --sample-ms 1 or --timing recorded)\n",
          100.0 * m.value("live_peak_sampled_fraction", 0.0));
  }
  if (p.contains("memory") && p["memory"].contains("footprint")) {
    const auto& f = p["memory"]["footprint"];
    const auto pages = [&](const char* at) {
      return f.contains(at) ? group_digits(uint64_t(std::max<int64_t>(0, f[at].value("pages", int64_t{0})))) : "-";
    };
    s += fmt::format("  page footprint (mincore): {} pages at the live peak, {} at the end\n",
                     pages(f.contains("at_live_peak") ? "at_live_peak" : "at_live_high"), pages("at_end"));
    std::string why = f["touched"].value("why", std::string());
    why = why.substr(0, why.find(';'));
    const std::string touched =
        f["touched"].value("method", "") != "none"
            ? group_digits(uint64_t(std::max<int64_t>(0, f["touched"].value("pages", int64_t{0})))) + " (soft-dirty)"
            : "not measured: " + why;
    s += fmt::format("  pages written during the replay: {}; page faults: {} minor, {} major\n", touched,
                     group_digits(p["page_faults"].value("minor", uint64_t{0})),
                     group_digits(p["page_faults"].value("major", uint64_t{0})));
  }
  if (p.contains("latency")) {
    const auto& l = p["latency"];
    s += fmt::format("  latency (ns; every {} call(s) timed; timer cost {:.1f} ns subtracted):\n",
                     l.value("sample_every", 0u), l.value("timer_overhead_ns", 0.0));
    for (const auto& [name, o] : l["ops"].items())
      s += fmt::format(
          "    {:<24} p50 {:>8.0f}  p90 {:>8.0f}  p99 {:>8.0f}  p99.9 {:>9.0f}  max {:>10.0f}  ({} samples)\n", name,
          o.value("p50_ns", 0.0), o.value("p90_ns", 0.0), o.value("p99_ns", 0.0), o.value("p99.9_ns", 0.0),
          o.value("max_ns", 0.0), group_digits(o.value("samples", uint64_t{0})));
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
