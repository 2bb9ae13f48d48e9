// heaplab replay: a trace on one allocator, or several side by side.
#include <fmt/core.h>
#include <memory>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "replay/compare.h"
#include "replay/launch.h"
#include "replay/settings.h"

namespace heaplab::cli {
namespace {

struct ReplayArgs {
  replay::ReplayOptions opt;
  // The settings' options as given (replay/settings.h's table), applied to
  // opt.settings once parsed: {setting, text, given}.
  struct Given {
    const replay::SettingInfo* info;
    std::string text;
    CLI::Option* option = nullptr;
  };
  std::vector<Given> settings;
  std::string out;
  bool list = false;
  bool quiet = false;
  bool json = false;
};

// Several allocators (or load modes): one replay each, in turn, then one
// table side by side (replay::replay_each).
int run_replays(const ReplayArgs& a, const std::vector<std::string>& allocs, const std::vector<std::string>& loads,
                bool all) {
  replay::ComparisonObserver observe;
  observe.starting = [&](const std::string& alloc, const std::string& load) {
    if (!a.quiet && !a.json) fmt::print(stderr, "heaplab: replaying on {} ({})\n", alloc, load);
  };
  observe.failed = [](const std::string& alloc, const std::string& load, const std::string& error) {
    fmt::print(stderr, "heaplab: error: replay on {} ({}): {}\n", alloc, load, error);
  };
  replay::Comparison c;
  try {
    c = replay::replay_each(a.opt, allocs, loads, all, observe);
  } catch (const replay::ReplayError& e) {
    throw Failure{std::string("replay: ") + e.what()};
  }
  const std::string text = nlohmann::json(c.results).dump(2) + "\n";
  if (!a.out.empty()) write_text(a.out, text, "replay: ");
  if (a.json)
    fmt::print("{}", text);
  else if (!a.quiet)
    fmt::print("{}", replay::comparison_table(c.results));
  return c.worst_exit;
}

int run_replay(ReplayArgs& a) {
  for (const ReplayArgs::Given& g : a.settings)
    if (g.option->count() > 0)
      if (std::string why = replay::set_setting(a.opt.settings, *g.info, g.text); !why.empty())
        throw Failure{std::string("replay: ") + g.info->option + ": " + why};
  if (a.list) {
    fmt::print("{}", replay::list_allocators());
    return 0;
  }
  if (a.opt.trace.empty()) throw Failure{"replay: no trace given (heaplab replay TRACE --allocator NAME)"};
  const bool all = a.opt.allocator == "all";
  std::vector<std::string> allocs, loads;
  try {
    allocs = replay::allocator_list(a.opt.allocator);
    loads = replay::load_list(a.opt.load);
  } catch (const replay::ReplayError& e) {
    throw Failure{std::string("replay: ") + e.what()};
  }
  if (allocs.size() * loads.size() > 1 || all) return run_replays(a, allocs, loads, all);
  replay::ReplayOutcome o;
  try {
    o = replay::run_replay(a.opt);
  } catch (const replay::ReplayError& e) {
    throw Failure{std::string("replay: ") + e.what()};
  }
  const std::string text = o.result.dump(2) + "\n";
  if (!a.out.empty()) write_text(a.out, text, "replay: ");
  if (a.json)
    fmt::print("{}", text);
  else if (!a.quiet && o.exit_code != 2)
    fmt::print("{}", replay::result_summary(o.result));
  if (o.exit_code != 0) fmt::print(stderr, "heaplab: error: replay: {}\n", o.error);
  return o.exit_code;
}

}  // namespace

void add_replay_commands(CLI::App& app, Commands& commands) {
  auto ra_ = std::make_shared<ReplayArgs>();
  ReplayArgs& ra = *ra_;
  auto* rp = app.add_subcommand(
      "replay",
      "Replay a trace on an allocator, one thread per recorded thread\n"
      "  heaplab replay TRACE [--allocator NAME[,NAME...]|all] [--load preload|direct|both] [--out result.json]\n"
      "Exits 0 when every call was replayed as recorded, 1 if the replay failed, 2 on errors.");
  rp->add_option("trace", ra.opt.trace, "Trace file (.hlt)");
  rp->add_option("--allocator", ra.opt.allocator,
                 "glibc (default), jemalloc, mimalloc, tcmalloc, or the path of an allocator .so; several "
                 "separated by commas, or all, replay in turn and print a table side by side")
      ->capture_default_str();
  rp->add_option("--load", ra.opt.load,
                 "preload: LD_PRELOAD the allocator; direct: a replayer linked against it (native API); "
                 "both (or preload,direct): one replay each")
      ->capture_default_str();
  // The settings, from their one table (names, help, defaults, checks).
  ra.settings.reserve(replay::setting_table().size());
  for (const replay::SettingInfo& info : replay::setting_table()) {
    if (info.kind == replay::SettingKind::flag) {  // memory: on by default, --no-memory turns it off
      rp->add_flag("!--no-memory", ra.opt.settings.memory,
                   "No memory measurement (no sampler, no live-bytes sums in the plan): wall time and calls only");
      continue;
    }
    ReplayArgs::Given& g = ra.settings.emplace_back();
    g.info = &info;
    g.text = replay::setting_text(ra.opt.settings, info);
    g.option = rp->add_option(info.option, g.text, info.help);
    if (info.key != std::string("threads") && info.key != std::string("latency") && info.key != std::string("speed"))
      g.option->capture_default_str();
  }
  rp->add_option("--timeout", ra.opt.timeout_s,
                 "Kill a replay that runs longer than this many seconds and count it failed (default: 2 minutes "
                 "plus 2 us a call, plus twice the recorded duration with --timing recorded)")
      ->check(CLI::Validator(
          [](std::string& v) {
            char* end = nullptr;
            const double d = std::strtod(v.c_str(), &end);
            return !v.empty() && end && *end == 0 && d > 0 ? std::string()
                                                           : "expected a number of seconds above 0, not '" + v + "'";
          },
          "SECONDS"));
  rp->add_option("-o,--out", ra.out, "Write the result JSON here");
  rp->add_flag("--json", ra.json, "Print the result JSON instead of the summary");
  rp->add_flag("-q,--quiet", ra.quiet, "No summary");
  rp->add_flag("--list-allocators", ra.list, "List the allocators and load modes available, and why not");

  commands.push_back({rp, [ra_] { return run_replay(*ra_); }});
}

}  // namespace heaplab::cli
