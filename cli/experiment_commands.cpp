// heaplab run / report / dashboard / results: experiments and their store.
#include <filesystem>
#include <fstream>
#include <cstring>
#include <fmt/core.h>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "analysis/trace_diff.h"
#include "analysis/trace_stats.h"
#include "capture/format/trace_reader.h"
#include "experiments/dashboard.h"
#include "experiments/diff.h"
#include "experiments/gate.h"
#include "experiments/metrics.h"
#include "experiments/plots.h"
#include "experiments/report.h"
#include "experiments/results.h"
#include "experiments/runner.h"
#include "experiments/slurm.h"
#include "experiments/spec.h"
#include "experiments/store.h"

namespace heaplab::cli {
namespace {

struct RunArgs {
  std::string file;
  experiments::RunnerOptions opt;
  uint32_t slurm = 0;  // shards of a Slurm job array (0: run here)
  std::vector<std::string> sbatch_args;
  bool wait = false;
};

struct ReportArgs {
  std::string results = "results", session, experiment, out, plots;
  experiments::ReportOptions opt;
};

struct GateArgs {
  std::string results = "results", session, baseline, junit, out;
  std::vector<std::string> budgets;
  experiments::GateOptions opt;
  bool no_significance = false;
};

struct ResultsArgs {
  std::string results = "results", session, format = "csv", out;
  std::vector<std::string> stores;
};

std::string store_path(const std::string& dir) { return dir + "/heaplab.db"; }

std::string session_report(experiments::Store& store, const experiments::SessionInfo& s,
                           experiments::ReportOptions opt) {
  if (opt.baseline.empty()) opt.baseline = s.baseline;
  if (opt.title.empty())
    opt.title = fmt::format("experiment {} (session {}, {} of {} runs)", s.experiment, s.id,
                            store.done_cells(s.id).size(), s.cells);
  return experiments::report(store.records(s.id), opt);
}

int run_experiment_cmd(const RunArgs& a) {
  experiments::ExperimentSpec spec;
  try {
    spec = experiments::load_experiment(a.file);
  } catch (const experiments::SpecError& e) {
    throw Failure{e.what()};
  }
  if (a.slurm) {
    if (!a.opt.shard.empty()) throw Failure{"run: --slurm makes the shards itself; drop --shard"};
    experiments::SlurmOptions so;
    so.experiment_file = a.file;
    so.results_dir = a.opt.results_dir;
    so.shards = a.slurm;
    so.session = a.opt.session;
    so.sbatch_args = a.sbatch_args;
    so.wait = a.wait;
    experiments::SlurmSubmission sub;
    try {
      sub = experiments::submit_slurm(spec, so);
    } catch (const std::runtime_error& e) {  // SlurmError, SpecError
      throw Failure{e.what()};
    }
    fmt::print(stderr,
               "heaplab: submitted job array {} ({} shard(s)) and merge job {} (after it) for session {}; scripts, "
               "shard stores and logs in {}\n",
               sub.array_job, a.slurm, sub.merge_job, sub.session, sub.dir);
    if (!a.wait) return 0;
    fmt::print("{}", sub.report);
    if (sub.merge_exit != 0)
      fmt::print(stderr, "heaplab: the merge job {} ended with exit {} (its log: {}/merge.log)\n", sub.merge_job,
                 sub.merge_exit, sub.dir);
    return sub.merge_exit == 0 ? 0 : 1;
  }
  experiments::RunnerResult r;
  try {
    r = experiments::run_experiment(spec, a.opt);
  } catch (const experiments::SpecError& e) {
    throw Failure{e.what()};
  } catch (const experiments::StoreOpenError& e) {  // a store that cannot be opened: exit 2
    throw Failure{e.what()};
  } catch (const std::runtime_error& e) {  // RunError: a trace, a session or a store that cannot go on (exit 2)
    throw Failure{e.what()};
  }
  experiments::Store store(r.store);
  const auto s = store.session(r.session);
  if (!a.opt.quiet && s && r.finished) {
    experiments::ReportOptions ro;
    ro.metrics = spec.metrics;
    fmt::print("{}", session_report(store, *s, ro));
  }
  fmt::print(stderr, "heaplab: {} runs now, {} stored before; session {} {} in {}{}\n", r.ran, r.already, r.session,
             r.finished ? "complete" : "incomplete", r.store,
             r.failed ? fmt::format("; {} run(s) failed or were not faithful", r.failed) : "");
  if (r.interrupted) {
    fmt::print(stderr, "heaplab: interrupted: run the same command again to continue\n");
    return 130;
  }
  return r.failed ? 1 : 0;
}

// A store that must exist, opened read-only (reports of a directory one
// may not write, e.g. a CI artifact).
experiments::Store existing_store(const std::string& results, const char* cmd) {
  if (!std::filesystem::exists(store_path(results)))
    throw Failure{std::string(cmd) + ": no results store at " + store_path(results) +
                  " (heaplab run FILE.yaml makes one)"};
  return experiments::Store(store_path(results), true);
}

int run_report_cmd(ReportArgs a) {
  experiments::Store store = existing_store(a.results, "report");
  const experiments::SessionInfo s = experiments::pick_session(store, a.session, a.experiment);
  if (a.opt.metrics.empty()) {
    // The experiment's own choice of metrics, from its stored text.
    try {
      a.opt.metrics = experiments::parse_experiment(s.spec, s.experiment + ".yaml").metrics;
    } catch (const experiments::SpecError&) {
    }
  }
  // The plots' directory checked before the report is printed (it was
  // refused after).
  if (!a.plots.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.plots, ec);
    if (ec || !std::filesystem::is_directory(a.plots))
      throw Failure{"report: --plots " + a.plots + ": cannot create the plot directory" +
                    (ec ? ": " + ec.message() : std::string(": not a directory"))};
  }
  write_or_print(a.out, session_report(store, s, a.opt));
  if (!a.plots.empty()) {
    std::vector<std::string> metrics = a.opt.metrics;
    if (metrics.empty()) metrics = experiments::default_metrics();
    for (const std::string& p : experiments::write_plots(store, s.id, metrics, a.plots))
      fmt::print(stderr, "heaplab: plot {}\n", p);
  }
  return 0;
}

int run_gate_cmd(GateArgs a) {
  for (const std::string& b : a.budgets) {
    try {
      a.opt.budgets.push_back(experiments::parse_budget(b));
    } catch (const std::invalid_argument& e) {
      throw Failure{std::string("gate: ") + e.what()};
    }
  }
  a.opt.significance = !a.no_significance;
  experiments::Store store = existing_store(a.results, "gate");
  const experiments::SessionInfo s = experiments::pick_session(store, a.session, "");
  // Without --baseline, one allocator of the session against another.
  if (a.baseline.empty() && a.opt.baseline_allocator.empty())
    throw Failure{"gate: --baseline SESSION is required (or --baseline-allocator, to compare within the session)"};
  const experiments::SessionInfo b = experiments::pick_session(store, a.baseline.empty() ? s.id : a.baseline, "");
  // What gate() compares: an allocator given on one side only stands for both.
  const std::string mine = a.opt.allocator.empty() ? a.opt.baseline_allocator : a.opt.allocator;
  const std::string theirs = a.opt.baseline_allocator.empty() ? a.opt.allocator : a.opt.baseline_allocator;
  if (b.id == s.id && mine == theirs)
    throw Failure{
        "gate: the session is its own baseline (give another --baseline, or --allocator and "
        "--baseline-allocator naming two allocators of it)"};
  for (const experiments::SessionInfo* x : {&s, &b})
    if (x->finished.empty())
      fmt::print(stderr, "heaplab: warning: session {} is not finished ({} of {} runs stored)\n", x->id,
                 store.done_cells(x->id).size(), x->cells);
  experiments::GateResult r;
  try {
    r = experiments::gate(store.records(b.id), store.records(s.id), a.opt);
  } catch (const std::invalid_argument& e) {
    throw Failure{std::string("gate: ") + e.what()};
  }
  experiments::GateReportInfo info;
  info.session = s.id;
  info.baseline = b.id;
  info.timestamp = experiments::utc_now_iso();
  info.hostname = s.host;
  // Steps in the history of the session's experiment, up to the session.
  std::vector<std::string> ids, metrics;
  std::vector<std::vector<experiments::RunRecord>> history;
  for (const experiments::SessionInfo& x : store.sessions()) {
    if (x.experiment == s.experiment && !x.finished.empty() && x.id != s.id) {
      ids.push_back(x.id);
      history.push_back(store.records(x.id));
    }
    if (x.id == s.id) break;
  }
  ids.push_back(s.id);
  history.push_back(store.records(s.id));
  // The history's steps: of what was gated, or without budgets of every
  // default metric (the latency percentiles too: a step across sessions is
  // worth showing where one session against another is too noisy to judge).
  if (a.opt.budgets.empty())
    metrics = experiments::default_metrics();
  else
    for (const experiments::Budget& budget : a.opt.budgets) metrics.push_back(budget.metric);
  const std::string steps = experiments::history_text(
      experiments::history_steps(ids, history, metrics, a.opt.allocator), s.experiment, ids.size());
  if (!a.junit.empty()) write_or_print(a.junit, experiments::gate_junit(r, a.opt, info));
  write_or_print(a.out, experiments::gate_text(r, a.opt, info) + steps);
  return r.passed() ? 0 : 1;
}

struct DiffArgs {
  std::string a, b, results = "results", format = "text", out;
  double alpha = 0.05;
  bool sessions = false;
};

// Two traces (both arguments files), else two sessions of the store.
int run_diff_cmd(const DiffArgs& d) {
  std::error_code ec;
  // Files unless --sessions says the two are session ids (one may name a file here too).
  if (!d.sessions)
    for (const std::string* x : {&d.a, &d.b})
      if (*x == "-" || std::filesystem::is_directory(*x, ec))
        throw Failure{"diff: " + *x +
                      " is not a regular file (standard input is not read; --sessions for session ids)"};
  const bool files =
      !d.sessions && std::filesystem::is_regular_file(d.a, ec) && std::filesystem::is_regular_file(d.b, ec);
  // A heaplab trace starts with its magic; anything else is read as a replay result (JSON).
  const auto is_trace = [](const std::string& path) {
    char magic[sizeof trace::kFileMagic] = {};
    std::ifstream f(path, std::ios::binary);
    return f.read(magic, sizeof magic) && std::memcmp(magic, trace::kFileMagic, sizeof magic) == 0;
  };
  if (files && is_trace(d.a) != is_trace(d.b))
    throw Failure{"diff: " + (is_trace(d.a) ? d.b : d.a) +
                  " is not a heaplab trace, and the other is: give two traces, two replay results or two sessions"};
  if (files && !is_trace(d.a)) {
    const auto load = [](const std::string& path) {
      nlohmann::json j = read_result_json(path, "diff");
      if (j.is_discarded() || !j.is_object())
        throw Failure{"diff: " + path + ": neither a heaplab trace nor a replay result (JSON)"};
      return j;
    };
    experiments::SessionDiffOptions o;
    o.a = d.a;
    o.b = d.b;
    o.format = d.format;
    try {
      write_or_print(d.out, experiments::result_diff(load(d.a), load(d.b), o));
    } catch (const std::invalid_argument& e) {
      throw Failure{std::string("diff: ") + e.what()};
    }
    return 0;
  }
  if (files) {
    auto ra = open_trace(d.a);
    auto rb = open_trace(d.b);
    const analysis::TraceStats sa = analysis::compute_stats(*ra), sb = analysis::compute_stats(*rb);
    try {
      write_or_print(d.out, analysis::trace_diff(sa, sb, {d.a, d.b}, d.format));
    } catch (const std::invalid_argument& e) {
      throw Failure{std::string("diff: ") + e.what()};
    }
    return 0;
  }
  if (!d.sessions)
    for (const std::string* x : {&d.a, &d.b}) {
      if (!std::filesystem::exists(*x, ec) &&
          (x->find('/') != std::string::npos || x->ends_with(".hlt") || x->ends_with(".json")))
        throw Failure{"diff: " + *x + ": no such file (two traces, two replay results, or two session ids)"};
    }
  if (!d.sessions)
    for (const std::string* x : {&d.a, &d.b}) {
      const std::string* other = x == &d.a ? &d.b : &d.a;
      if (std::filesystem::is_regular_file(*x, ec) && !std::filesystem::is_regular_file(*other, ec))
        throw Failure{"diff: " + *x + " is a file and " + *other +
                      " is not: give two traces, two replay results, or two session ids (--sessions)"};
    }
  experiments::Store store = existing_store(d.results, "diff");
  const experiments::SessionInfo a = experiments::pick_session(store, d.a, "");
  const experiments::SessionInfo b = experiments::pick_session(store, d.b, "");
  experiments::SessionDiffOptions o;
  o.a = a.id;
  o.b = b.id;
  o.format = d.format;
  o.alpha = d.alpha;
  try {
    write_or_print(d.out, experiments::session_diff(store.records(a.id), store.records(b.id), o));
  } catch (const std::invalid_argument& e) {
    throw Failure{std::string("diff: ") + e.what()};
  }
  return 0;
}

int run_dashboard_cmd(const std::string& results, std::string out) {
  experiments::Store store = existing_store(results, "dashboard");
  if (out.empty()) out = results + "/dashboard";
  const experiments::DashboardSummary d = experiments::write_dashboard(store, store_path(results), out);
  fmt::print("dashboard: {} ({} experiment(s), {} session(s), {} series)\n", d.index, d.experiments, d.sessions,
             d.series);
  for (const std::string& r : d.regressions) fmt::print("  regression: {}\n", r);
  for (const std::string& c : d.change_points) fmt::print("  change point: {}\n", c);
  return 0;
}

int run_results_cmd(const std::string& what, const ResultsArgs& a) {
  std::error_code ec;
  if (what == "merge") {
    std::filesystem::create_directories(a.results, ec);
    experiments::Store store(store_path(a.results));
    for (std::string other : a.stores) {
      // (A results directory, as --results takes everywhere: its store.)
      if (std::filesystem::is_directory(other)) other = store_path(other);
      if (std::filesystem::equivalent(other, store_path(a.results), ec))
        throw Failure{"results merge: '" + other + "' is the store being merged into"};
      if (!std::filesystem::exists(other)) throw Failure{"results merge: " + other + ": no such file"};
      const auto [added, kept] = store.merge_from(other);
      fmt::print(stderr, "heaplab: {}: {} runs added{}\n", other, added,
                 kept ? fmt::format(", {} already there kept (same session and cell)", kept) : "");
    }
    fmt::print("{}", experiments::sessions_table(store.sessions()));
    return 0;
  }
  experiments::Store store = existing_store(a.results, "results");
  if (what == "list") {
    fmt::print("{}", experiments::sessions_table(store.sessions()));
    return 0;
  }
  const experiments::SessionInfo s = experiments::pick_session(store, a.session, "");
  if (a.format == "csv")
    write_or_print(a.out, experiments::export_csv(store, s.id));
  else if (a.format == "gbench")
    write_or_print(a.out, experiments::export_gbench(store, s.id));
  else
    throw Failure{"results export: --format: expected csv or gbench, not '" + a.format + "'"};
  return 0;
}

}  // namespace

void add_experiment_commands(CLI::App& app, Commands& commands) {
  auto runa_ = std::make_shared<RunArgs>();
  RunArgs& runa = *runa_;
  auto* run = app.add_subcommand(
      "run",
      "Run an experiment file: its traces x allocators x repetitions, into the results store\n"
      "  heaplab run experiments/quick-start.yaml [--results DIR] [--shard K/N | --slurm N [--wait]]\n"
      "Resumes an interrupted run of the same file. Exits 0 when every run was faithful, "
      "1 if some failed, 2 on errors, 130 when interrupted.");
  run->add_option("file", runa.file, "Experiment file (YAML)")->required();
  run->add_option("--results", runa.opt.results_dir, "Results directory (the store is DIR/heaplab.db)")
      ->capture_default_str();
  run->add_option("--shard", runa.opt.shard, "Run only every N-th run, the K-th slice (K/N, 1-based)");
  run->add_option("--session", runa.opt.session, "Session id to start or resume (default: resume or a new one)");
  run->add_flag("--new", runa.opt.fresh, "Start a new session even if an unfinished one matches");
  run->add_flag("-q,--quiet", runa.opt.quiet, "No progress and no report");
  run->add_option("--slurm", runa.slurm,
                  "Submit as a Slurm job array of N shards and a merge job after it (scripts and logs in "
                  "RESULTS/slurm/SESSION); trace files must be on storage every node sees")
      ->check(CLI::Range(1u, 100000u));
  run->add_option("--sbatch-arg", runa.sbatch_args,
                  "With --slurm: an argument for sbatch (repeatable, e.g. "
                  "--sbatch-arg=--partition=big)");
  run->add_flag("--wait", runa.wait, "With --slurm: wait for the merge job and print the session's report");

  commands.push_back({run, [runa_] { return run_experiment_cmd(*runa_); }});

  auto repa_ = std::make_shared<ReportArgs>();
  ReportArgs& repa = *repa_;
  auto* rep = app.add_subcommand("report",
                                 "Compare the allocators of a stored session: medians, spread, ratio to "
                                 "the baseline, significance (Mann-Whitney U)");
  rep->add_option("--results", repa.results, "Results directory")->capture_default_str();
  rep->add_option("--session", repa.session, "Session id (default: the newest)");
  rep->add_option("--experiment", repa.experiment, "The newest session of this experiment");
  rep->add_option("--format", repa.opt.format, "table, md, csv or json")
      ->check(CLI::IsMember({"table", "md", "csv", "json"}))
      ->capture_default_str();
  rep->add_option("--metric", repa.opt.metrics, "Metrics to report (repeatable; default: the experiment's)");
  rep->add_option("--baseline", repa.opt.baseline, "Allocator label to compare against (default: the experiment's)");
  rep->add_option("--alpha", repa.opt.alpha, "Significance level")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  rep->add_option("-o,--out", repa.out, "Write the report here");
  rep->add_option("--plots", repa.plots, "Also write SVG plots here: heap over time, latency curves, bars per metric");

  commands.push_back({rep, [repa_] { return run_report_cmd(*repa_); }});

  auto gatea_ = std::make_shared<GateArgs>();
  GateArgs& gatea = *gatea_;
  auto* gate = app.add_subcommand(
      "gate",
      "Gate a CI job: a session's replays against a baseline session (or one allocator against another), "
      "a budget per metric, significance required\n"
      "  heaplab gate --baseline SESSION [--session SESSION] [--budget heap_peak_mib=+3%]... [--junit FILE]\n"
      "Exits 0 when every check passed, 1 on a regression beyond its budget or a failed or missing run, 2 on errors.");
  gate->add_option("--results", gatea.results, "Results directory")->capture_default_str();
  gate->add_option("--session", gatea.session, "The session judged (default: the newest)");
  gate->add_option("--baseline", gatea.baseline,
                   "The baseline session (default with --baseline-allocator: the session)");
  gate->add_option("--allocator", gatea.opt.allocator, "Judge only this allocator of the session");
  gate->add_option("--baseline-allocator", gatea.opt.baseline_allocator,
                   "Against this allocator of the baseline (default: the allocator of the same label)");
  gate->add_option(
      "--budget", gatea.budgets,
      "METRIC=+N% or METRIC=+N (in the metric's unit): the worsening allowed, repeatable "
      "(default: peak RSS +5%, heap peak +10%, wall time and fragmentation +15%, above what each moved between "
      "sessions of one build in scripts/bench-gate-noise.py; latency percentiles, which moved more, only with a "
      "budget)");
  gate->add_option("--alpha", gatea.opt.alpha, "Significance level")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  gate->add_flag("--no-significance", gatea.no_significance,
                 "A change beyond its budget fails whether or not it is significant");
  gate->add_option("--junit", gatea.junit, "Also write JUnit XML here (CI systems show it as tests)");
  gate->add_option("-o,--out", gatea.out, "Write the text here instead of standard output");

  commands.push_back({gate, [gatea_] { return run_gate_cmd(*gatea_); }});

  auto diffa_ = std::make_shared<DiffArgs>();
  DiffArgs& diffa = *diffa_;
  auto* diff = app.add_subcommand("diff",
                                  "Two traces side by side (calls, objects, bytes, the live-bytes curve, size and "
                                  "lifetime histograms), two replay results (-o JSON), or two sessions of the store "
                                  "(every metric, ratio, significance)\n"
                                  "  heaplab diff A.hlt B.hlt | heaplab diff SESSION_A SESSION_B [--results DIR]");
  diff->add_option("a", diffa.a, "Trace file or session id")->required();
  diff->add_option("b", diffa.b, "Trace file or session id")->required();
  diff->add_option("--format", diffa.format, "text, md or json")
      ->check(CLI::IsMember({"text", "md", "json"}))
      ->capture_default_str();
  diff->add_option("--results", diffa.results, "Results directory (sessions)")->capture_default_str();
  diff->add_option("--alpha", diffa.alpha, "Significance level (sessions)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  diff->add_option("-o,--out", diffa.out, "Write here instead of standard output");
  diff->add_flag("--sessions", diffa.sessions, "A and B are session ids (even if files of those names exist here)");

  commands.push_back({diff, [diffa_] { return run_diff_cmd(*diffa_); }});

  auto dash_ = std::make_shared<std::pair<std::string, std::string>>("results", "");
  std::string& dash_results = dash_->first;
  std::string& dash_out = dash_->second;
  auto* dash = app.add_subcommand("dashboard",
                                  "Write a static HTML dashboard of the results store (opens offline): "
                                  "history per metric, regressions flagged, drill-down per session");
  dash->add_option("--results", dash_results, "Results directory")->capture_default_str();
  dash->add_option("-o,--out", dash_out, "Directory of the site (index.html); default: RESULTS/dashboard");

  commands.push_back({dash, [dash_] { return run_dashboard_cmd(dash_->first, dash_->second); }});

  auto resa_ = std::make_shared<ResultsArgs>();
  ResultsArgs& resa = *resa_;
  auto* res = app.add_subcommand("results", "The results store: list sessions, merge stores (shards), export runs");
  res->require_subcommand(1);
  auto* res_list = res->add_subcommand("list", "Sessions in the store");
  res_list->add_option("--results", resa.results, "Results directory")->capture_default_str();
  auto* res_merge = res->add_subcommand("merge", "Merge other stores (e.g. shards' DIR/heaplab.db) into this one");
  res_merge->add_option("stores", resa.stores, "Stores to merge in")->required();
  res_merge->add_option("--results", resa.results, "Results directory merged into")->capture_default_str();
  auto* res_export = res->add_subcommand("export", "A session's runs as CSV or Google Benchmark JSON");
  res_export->add_option("--results", resa.results, "Results directory")->capture_default_str();
  res_export->add_option("--session", resa.session, "Session id (default: the newest)");
  res_export->add_option("--format", resa.format, "csv or gbench")->capture_default_str();
  res_export->add_option("-o,--out", resa.out, "Write here instead of standard output");

  commands.push_back({res_list, [resa_] { return run_results_cmd("list", *resa_); }});
  commands.push_back({res_merge, [resa_] { return run_results_cmd("merge", *resa_); }});
  commands.push_back({res_export, [resa_] { return run_results_cmd("export", *resa_); }});
}

}  // namespace heaplab::cli
