// heaplab capture: a program run under the capture shim (or perf), its trace.
#include <filesystem>
#include <fmt/core.h>
#include <memory>
#include <string>
#include <vector>

#include "capture/launch/launcher.h"
#include "cli/cli.h"

namespace heaplab::cli {
namespace {

struct CaptureArgs {
  launch::CaptureOptions opt;
  std::string codec = "zstd";
  int level = 0;
  bool follow = false;
  std::string normalise = "live";
  bool quiet = false;
};

int run_capture(CaptureArgs& a, std::vector<std::string> command) {
  a.opt.argv = std::move(command);
  if (a.follow) a.opt.follow_fork = a.opt.follow_exec = true;
  a.opt.live = a.normalise == "live";
  if (a.opt.output.empty() && !a.opt.argv.empty())
    a.opt.output = std::filesystem::path(a.opt.argv[0]).filename().string() + ".hlt";
  a.opt.normalise.codec = parse_codec(a.codec);
  a.opt.normalise.level = codec_level(a.opt.normalise.codec, a.level);
  // zstd's default level, but level 1 while the program keeps every core
  // busy or the normaliser is behind (live normalising): the normaliser takes about 13% less CPU, for
  // traces about 4% larger (BENCHMARKS.md). A --level given holds throughout.
  if (a.level == 0 && a.opt.normalise.codec == trace::kCodecZstd) a.opt.normalise.busy_level = 1;
  launch::CaptureResult r;
  try {
    r = launch::run_capture(a.opt);
  } catch (const launch::LaunchError& e) {
    throw Failure{std::string("capture: ") + e.what()};
  }
  if (!a.quiet || !r.failed.empty() || r.traces.empty() || !r.notes.empty())
    fmt::print(stderr, "{}", launch::summary(r, a.opt));
  if (!r.failed.empty() || r.traces.empty()) return kExitBadInput;
  // Calls lost because capture stopped (a full disk ...): the trace is not
  // the program's whole run. (The program's own status is in the summary.)
  // A program that failed on its own keeps its status.
  if (r.exit_code == 0)
    for (const launch::TraceResult& t : r.traces)
      if (t.report.dropped_calls) return kExitIncomplete;
  return r.exit_code;
}

}  // namespace

void add_capture_commands(CLI::App& app, Commands& commands, const CommandLine& line) {
  auto cap_args_ = std::make_shared<CaptureArgs>();
  CaptureArgs& cap_args = *cap_args_;
  auto* cap =
      app.add_subcommand("capture",
                         "Run a program under the capture shim and write its heap trace\n"
                         "  heaplab capture [options] [--] PROGRAM [ARGS...]\n"
                         "Exits with the program's status (128+N if killed by signal N), 2 on errors, 3 when capture "
                         "stopped early (a full disk) and calls are missing from the trace.");
  cap->add_option("-o,--output", cap_args.opt.output, "Output trace (default: PROGRAM.hlt)");
  cap->add_option("--allocator", cap_args.opt.allocator,
                  "Allocator to run the program on: glibc (default), jemalloc, mimalloc, tcmalloc or a .so path");
  cap->add_flag("--follow-fork", cap_args.opt.follow_fork, "Capture fork children too (a trace each)");
  cap->add_flag("--follow-exec", cap_args.opt.follow_exec, "Capture programs exec'd by the program too (a trace each)");
  cap->add_flag("--follow", cap_args.follow, "Both --follow-fork and --follow-exec");
  cap->add_option("--raw-dir", cap_args.opt.raw_dir, "Where raw capture files go (default: OUTPUT.raw.PID)");
  cap->add_flag("--keep-raw", cap_args.opt.keep_raw,
                "Keep the raw files (heaplab import --from heaplab-raw reads them)");
  cap->add_option("--normalise", cap_args.normalise,
                  "When raw events become the trace: live (while the program runs; scratch disk stays under "
                  "about 64 MiB) or after (once it has exited; needs scratch disk of 32 bytes a call)")
      ->check(CLI::IsMember({"live", "after"}))
      ->capture_default_str();
  cap->add_option("--latency", cap_args.opt.latency,
                  "Time one call in N inside the allocator, in the program (0: none); `heaplab replay --latency-of "
                  "program` then times the same calls for a side-by-side comparison")
      ->check(CLI::Range(0u, 1u << 30));
  cap->add_option("--clock", cap_args.opt.clock, "Timestamps: auto (invariant TSC if present), tsc or monotonic")
      ->check(CLI::IsMember({"auto", "tsc", "monotonic"}))
      ->capture_default_str();
  cap->add_option("--codec", cap_args.codec, "Trace compression: zstd, lz4 or none")
      ->check(CLI::IsMember({"zstd", "lz4", "none"}))
      ->capture_default_str();
  cap->add_option("--level", cap_args.level,
                  "zstd level 1..22 (default 3; with --normalise live, 1 while the program keeps every core "
                  "busy or the normaliser is behind), or lz4 acceleration")
      ->check(CLI::Range(1, 65537));
  cap->add_flag("-q,--quiet", cap_args.quiet, "No summary");
  cap->add_option("--method", cap_args.opt.method,
                  "software (the shim writes per-thread files) or pt (ptwrite into Intel PT, recorded by perf "
                  "record, decoded afterwards; needs a CPU with ptwrite)")
      ->check(CLI::IsMember({"software", "pt"}))
      ->capture_default_str();
  cap->add_option("--pt-fallback", cap_args.opt.pt_fallback,
                  "--method pt on a machine without Intel PT or ptwrite: refuse, or record with --method software")
      ->check(CLI::IsMember({"refuse", "software"}))
      ->capture_default_str();
  cap->add_option("--pt-buffers", cap_args.opt.pt.buffers,
                  "per-cpu (every thread; context-switch sideband) or per-thread (perf --per-thread: "
                  "threads started later are not traced)")
      ->check(CLI::IsMember({"per-cpu", "per-thread"}))
      ->capture_default_str();
  cap->add_option("--pt-aux-kib", cap_args.opt.pt.aux_kib, "AUX buffer per CPU or thread, KiB (default: perf's)");
  cap->add_option("--pt-snapshot", cap_args.opt.pt.snapshot,
                  "Snapshot mode (perf -S): 'on' or a size (e.g. 64M); only the newest trace is kept");
  cap->add_option("--pt-control", cap_args.opt.pt.control, "perf record --control, e.g. fifo:ctl.fifo,ack.fifo");
  cap->add_option("--pt-psb-period", cap_args.opt.pt.psb_period, "intel_pt psb_period 0..15 (default: perf's)");
  cap->add_option("--pt-decoder", cap_args.opt.pt_decoder,
                  "How to decode the recording: direct (fastest), dlfilter or text (both through perf script)")
      ->check(CLI::IsMember({"direct", "dlfilter", "text"}))
      ->capture_default_str();
  cap->add_option("--perf", cap_args.opt.pt.perf, "The perf binary")->capture_default_str();
  // Everything from the first argument that is not an option of ours on (or
  // after `--`) is the program and its arguments.
  cap->prefix_command();

  commands.push_back({cap, [cap_args_, cap, &line] {
                        // `heaplab capture [options] -- PROGRAM ARGS`: what follows `--` is the
                        // program's, never parsed as ours; without `--`, the first argument that
                        // is not one of our options starts the program (prefix_command).
                        if (line.dashes && !cap->remaining().empty())
                          throw Failure{"capture: unexpected arguments before --: " + cap->remaining().front()};
                        return run_capture(*cap_args_, line.dashes ? line.after_dashes : cap->remaining());
                      }});
}

}  // namespace heaplab::cli
