// heaplab replay: a trace on one allocator, or several side by side.
#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "analysis/layout.h"
#include "common/files.h"
#include "common/text.h"
#include "replay/addresses.h"
#include "replay/compare.h"
#include "replay/launch.h"
#include "replay/settings.h"
#include "common/json.h"

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
  std::string emit_trace;
  bool list = false;
  bool quiet = false;
  bool json = false;
};

// With --quiet (no summary, no table), what the replays warn of still goes
// to standard error, each once: a replay of a trace cut short, for one.
void print_warnings(const std::vector<nlohmann::json>& results) {
  std::vector<std::string> said;
  for (const nlohmann::json& r : results) {
    const auto w = r.find("warnings");
    if (w == r.end() || !w->is_array()) continue;
    for (const nlohmann::json& text : *w)
      if (text.is_string() && std::find(said.begin(), said.end(), text.get<std::string>()) == said.end()) {
        said.push_back(text.get<std::string>());
        fmt::print(stderr, "heaplab: warning: replay: {}\n", said.back());
      }
  }
}

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
  else
    print_warnings(c.results);
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
  for (const ReplayArgs::Given& g : a.settings)
    if (g.option->count() > 0 && g.info->key == std::string("speed") &&
        a.opt.settings.timing != replay::Timing::recorded)
      throw Failure{
          "replay: --speed paces a replay at the recorded pace: give --timing recorded too (a replay at "
          "--timing fast runs as fast as it can)"};
  if (a.opt.trace.empty()) throw Failure{"replay: no trace given (heaplab replay TRACE --allocator NAME)"};
  const bool all = a.opt.allocator == "all";
  std::vector<std::string> allocs, loads;
  try {
    allocs = replay::allocator_list(a.opt.allocator);
    loads = replay::load_list(a.opt.load);
  } catch (const replay::ReplayError& e) {
    throw Failure{std::string("replay: ") + e.what()};
  }
  if (!a.emit_trace.empty() && (allocs.size() * loads.size() > 1 || all))
    throw Failure{"replay: --emit-trace takes one allocator and one load mode (a trace holds one replay's addresses)"};
  // Where the results go, checked before the replays (a full disk or a
  // mistyped directory found after them loses them).
  // Nor the trace itself, nor one another.
  for (const std::string* out : {&a.out, &a.emit_trace})
    if (!out->empty()) {
      std::string why = common::output_problem(*out);
      if (why.empty()) why = common::output_is_input(*out, {a.opt.trace});
      if (!why.empty()) throw Failure{std::string("replay: ") + (out == &a.emit_trace ? "--emit-trace: " : "") + why};
    }
  if (!a.out.empty() && !a.emit_trace.empty()) {
    // By path (neither exists yet), or by inode (a hard link of the other).
    std::error_code e1, e2;
    const bool same_path = std::filesystem::weakly_canonical(std::filesystem::absolute(a.out, e1), e1) ==
                               std::filesystem::weakly_canonical(std::filesystem::absolute(a.emit_trace, e2), e2) &&
                           !e1 && !e2;
    if (same_path || !common::output_is_input(a.out, {a.emit_trace}).empty())
      throw Failure{"replay: -o and --emit-trace name the same file '" + a.out + "' (the trace would be replaced)"};
  }
  if (allocs.size() * loads.size() > 1 || all) return run_replays(a, allocs, loads, all);
  replay::ReplayOutcome o;
  std::vector<uint64_t> addresses;
  replay::ReplayOptions opt = a.opt;
  if (!a.emit_trace.empty()) {
    // What a trace written again must be, checked before the replay.
    std::unique_ptr<trace::TraceReader> r;
    try {
      r = trace::TraceReader::open(a.opt.trace);  // (its truncation is the error: no warning first)
    } catch (const trace::TraceError& e) {
      throw Failure{std::string("replay: ") + e.what()};
    }
    if (!r->complete())
      throw Failure{"replay: --emit-trace: " + a.opt.trace +
                    ": needs a complete trace (this one is truncated, so its ids have holes a trace written again "
                    "cannot keep)"};
    opt.addresses = &addresses;
  }
  try {
    o = replay::run_replay(opt);
  } catch (const replay::ReplayError& e) {
    throw Failure{std::string("replay: ") + e.what()};
  }
  if (!a.emit_trace.empty() && o.addresses_read) {
    try {
      const replay::EmittedTrace e =
          replay::write_trace_with_addresses(a.opt.trace, std::move(addresses), a.emit_trace,
                                             {{"allocator", o.result["allocator"]},
                                              {"exit", o.result["exit"]},
                                              {"replay_threads", o.result["replay_threads"]}});
      fmt::print(stderr, "heaplab: wrote {}: {} events, {} with the address of their block on {} ({})\n", a.emit_trace,
                 e.events, e.addressed, a.opt.allocator, a.opt.load);
    } catch (const std::exception& e) {
      throw Failure{std::string("replay: --emit-trace: ") + e.what()};
    }
  } else if (!a.emit_trace.empty()) {
    if (o.exit_code == 0) o.exit_code = 1;
    o.error = (o.error.empty() ? std::string("the replay did not finish") : o.error) + " (so --emit-trace wrote no " +
              a.emit_trace + ")";
  }
  const std::string text = o.result.dump(2) + "\n";
  if (!a.out.empty()) write_text(a.out, text, "replay: ");
  if (a.json)
    fmt::print("{}", text);
  else if (!a.quiet && o.exit_code != 2)
    fmt::print("{}", replay::result_summary(o.result));
  else
    print_warnings({o.result});  // (-q, or no summary of a replay refused)
  if (o.exit_code != 0) fmt::print(stderr, "heaplab: error: replay: {}\n", o.error);
  return o.exit_code;
}

struct LayoutArgs {
  replay::ReplayOptions opt;
  CLI::Option* allocator = nullptr;
  CLI::Option* load = nullptr;
  CLI::Option* threads = nullptr;
  std::string out;
  bool json = false;
  bool annotate = false;
};

// heaplab layout: each allocator's replay with its addresses, measured; or
// the addresses a trace already holds (replay --emit-trace).
int run_layout(LayoutArgs& a) {
  if (a.opt.trace.empty()) throw Failure{"layout: no trace given (heaplab layout TRACE --allocator NAME)"};
  std::unique_ptr<trace::TraceReader> r = open_trace(a.opt.trace);
  std::string line;
  replay::LayoutLines print = [&](const std::string& l) {
    if (std::fwrite(l.data(), 1, l.size(), stdout) != l.size()) output_failed();
  };
  const replay::LayoutLines* lines = a.annotate ? &print : nullptr;
  struct Column {
    std::string name, load;
    analysis::LayoutSummary summary;
  };
  std::vector<Column> columns;
  int worst = 0;
  if (a.annotate && a.json) throw Failure{"layout: --annotate or --json, not both (both go to standard output)"};
  if (a.allocator->count() == 0 && r->has_addresses()) {
    if (a.load->count() || a.threads->count())
      throw Failure{"layout: " + a.opt.trace +
                    " holds a replay's addresses, measured as recorded: --load and --threads are for a replay (give "
                    "--allocator to replay it again)"};
    // The trace holds one replay's addresses: measured as they are.
    const nlohmann::json meta = common::parse_bounded_json(r->metadata());
    Column c;
    c.name = "recorded";
    if (meta.is_object() && meta.contains("replay") && meta["replay"].is_object() &&
        meta["replay"].contains("allocator") && meta["replay"]["allocator"].is_object()) {
      c.name = meta["replay"]["allocator"].value("name", c.name);
      c.load = meta["replay"]["allocator"].value("load", "");
    }
    // (Run by one replay thread: in the trace's order.)
    const bool in_order = meta.is_object() && meta.contains("replay") && meta["replay"].is_object() &&
                                  meta["replay"].contains("replay_threads")
                              ? meta["replay"]["replay_threads"] == 1
                              : r->active_threads().size() == 1;
    trace::AddressCursor cur(*r);
    try {
      c.summary = replay::measure_layout(
          a.opt.trace, [&](uint64_t, uint64_t seq) { return cur.at(seq); }, in_order, lines);
    } catch (const trace::TraceError& e) {
      throw Failure{std::string("layout: ") + e.what()};
    }
    columns.push_back(std::move(c));
  } else {
    std::vector<std::string> allocs, loads;
    try {
      allocs = replay::allocator_list(a.opt.allocator);
      loads = replay::load_list(a.opt.load);
    } catch (const replay::ReplayError& e) {
      throw Failure{std::string("layout: ") + e.what()};
    }
    if (a.annotate && allocs.size() * loads.size() > 1)
      throw Failure{"layout: --annotate takes one allocator and one load mode (the notes are one layout's)"};
    const bool all = a.opt.allocator == "all";
    for (const std::string& alloc : allocs) {
      for (const std::string& load : loads) {
        replay::ReplayOptions opt = a.opt;
        opt.allocator = alloc;
        opt.load = load;
        if (!a.annotate && !a.json && allocs.size() * loads.size() > 1)
          fmt::print(stderr, "heaplab: replaying on {} ({})\n", alloc, load);
        replay::ReplayLayout l;
        try {
          l = replay::replay_layout(opt, lines);
        } catch (const replay::NotAvailable& e) {
          if (!all) throw Failure{std::string("layout: ") + e.what()};
          fmt::print(stderr, "heaplab: skipped {} ({}): {}\n", alloc, load, e.what());
          continue;
        } catch (const replay::ReplayError& e) {
          throw Failure{std::string("layout: ") + e.what()};
        } catch (const trace::TraceError& e) {
          throw Failure{std::string("layout: ") + e.what()};
        }
        if (!l.measured || l.outcome.exit_code != 0) {
          fmt::print(stderr, "heaplab: error: layout: replay on {} ({}): {}\n", alloc, load,
                     l.outcome.error.empty() ? "it did not finish" : l.outcome.error);
          worst = std::max(worst, l.outcome.exit_code == 0 ? 1 : l.outcome.exit_code);
          if (!l.measured) continue;
        }
        columns.push_back({alloc, load, std::move(l.summary)});
      }
    }
  }
  nlohmann::json j = {{"format", "heaplab-layout"}, {"format_version", 1}, {"trace", a.opt.trace}};
  j["page_bytes"] = analysis::kLayoutPage;
  j["allocators"] = nlohmann::json::array();
  for (const Column& c : columns)
    j["allocators"].push_back({{"name", c.name}, {"load", c.load}, {"layout", analysis::layout_json(c.summary)}});
  if (!a.out.empty()) write_text(a.out, j.dump(2) + "\n", "layout: ");
  if (a.json) {
    fmt::print("{}\n", j.dump(2));
  } else if (!a.annotate && !columns.empty()) {
    std::vector<std::pair<std::string, const analysis::LayoutSummary*>> cols;
    cols.reserve(columns.size());
    for (const Column& c : columns)
      cols.emplace_back(c.load.empty() || c.load == "preload" ? c.name : c.name + " (" + c.load + ")", &c.summary);
    std::string text = fmt::format("layout of {}: {} events; pages of {} bytes, a block's requested bytes\n\n",
                                   a.opt.trace, common::group_digits(columns[0].summary.events), analysis::kLayoutPage);
    text += analysis::layout_table(cols);
    for (const auto& [name, s] : cols)
      text += fmt::format("\n{}, by size class:\n{}", name, analysis::layout_size_table(*s));
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) output_failed();
  }
  return worst;
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
  rp->add_option("--emit-trace", ra.emit_trace,
                 "Also write the trace again with the address each call returned or freed on this allocator "
                 "(format 1.2; heaplab cat shows them, heaplab layout measures them)");
  rp->add_flag("--json", ra.json, "Print the result JSON instead of the summary");
  rp->add_flag("-q,--quiet", ra.quiet, "No summary or table (warnings still go to standard error)");
  rp->add_flag("--list-allocators", ra.list, "List the allocators and load modes available, and why not");

  commands.push_back({rp, [ra_] { return run_replay(*ra_); }});

  auto la_ = std::make_shared<LayoutArgs>();
  LayoutArgs& la = *la_;
  la.opt.settings.memory = false;  // (no sampler: the addresses are what is measured)
  auto* ly = app.add_subcommand(
      "layout",
      "Where an allocator puts each block of a trace: neighbours and gaps, pages spanned and gained, the working "
      "set, blocks sharing a page or cache line with another thread's\n"
      "  heaplab layout TRACE [--allocator NAME[,NAME...]|all] [--annotate | --json] [-o layout.json]\n"
      "A trace written by replay --emit-trace is measured as recorded unless --allocator is given. Exits 0, 1 if a "
      "replay failed, 2 on errors.");
  ly->add_option("trace", la.opt.trace, "Trace file (.hlt)");
  la.allocator = ly->add_option("--allocator", la.opt.allocator,
                                "glibc (default), jemalloc, mimalloc, tcmalloc, the path of an allocator .so, several "
                                "separated by commas, or all: side by side")
                     ->capture_default_str();
  la.load = ly->add_option("--load", la.opt.load, "preload or direct (as replay --load)")->capture_default_str();
  la.threads =
      ly->add_option("--threads", la.opt.settings.threads, "Replay threads (as replay --threads; 0: one per recorded)")
          ->check(not_negative());
  ly->add_flag("--annotate", la.annotate,
               "Print every call with its note, as the seed's overhead.py: prev ADDR, gap N, next ADDR, gap N, "
               "pages [A, B], K more pages");
  ly->add_flag("--json", la.json, "Print the summaries as JSON");
  ly->add_option("-o,--out", la.out, "Write the summaries as JSON here");
  commands.push_back({ly, [la_] { return run_layout(*la_); }});
}

}  // namespace heaplab::cli
