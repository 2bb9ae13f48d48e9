// The heaplab command: parses arguments and calls the libraries. Nothing
// here knows the trace layout; every subcommand is a few lines.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <fmt/core.h>
#include <string>
#include <vector>

#include "analysis/trace_check.h"
#include "analysis/trace_stats.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_writer.h"
#include "capture/import/cmt_text.h"
#include "capture/import/input_stream.h"
#include "capture/import/metadata.h"
#include "capture/launch/launcher.h"
#include "capture/pt/pt_import.h"
#include "capture/normalise/normalise.h"
#include "common/files.h"
#include "common/text.h"
#include "allocators/library.h"
#include "experiments/dashboard.h"
#include "experiments/metrics.h"
#include "experiments/plots.h"
#include "experiments/report.h"
#include "experiments/results.h"
#include "experiments/runner.h"
#include "experiments/spec.h"
#include "experiments/store.h"
#include "replay/compare.h"
#include "replay/launch.h"

namespace {

using namespace heaplab;
using common::group_digits;

constexpr int kExitProblems = 1;  // check found problems
constexpr int kExitBadInput = 2;  // bad usage or unreadable input

struct Failure {
  std::string message;
};

std::unique_ptr<trace::TraceReader> open_trace(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  if (!r->complete()) fmt::print(stderr, "heaplab: warning: {}: {}\n", path, r->warning());
  return r;
}

// ------------------------------------------------------------------ import
struct ImportArgs {
  std::string from;
  std::string input;
  std::string output;
  std::string codec = "zstd";
  int level = 0;  // 0: the codec's default (zstd 3, lz4 1)
  uint32_t chunk_events = 1u << 20;
  std::string decoder = "direct";  // perf-pt
  int64_t pid = -1;                // perf-pt: the process to keep
  std::string perf = "perf";       // perf-pt: dlfilter and text decoders
};

trace::Codec parse_codec(const std::string& codec) {
  return codec == "zstd" ? trace::kCodecZstd : codec == "lz4" ? trace::kCodecLz4 : trace::kCodecNone;
}

int codec_level(trace::Codec codec, int level) {
  int l = level != 0 ? level : codec == trace::kCodecZstd ? 3 : 1;
  if (codec == trace::kCodecZstd && (l < 1 || l > 22))
    throw Failure{"--level: zstd levels are 1 to 22 (got " + std::to_string(l) + ")"};
  return l;
}

// Writes beside `output` (`write(tmp)`) and renames at the end: a failed
// write leaves no half-written trace under the requested name (nor touches a
// user's existing file).
template <typename F>
void write_then_rename(const std::string& output, F&& write) {
  const std::string tmp = output + ".heaplab-" + std::to_string(::getpid()) + ".part";
  try {
    write(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, output, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Failure{output + ": cannot create: " + ec.message()};
  }
}

// The normaliser's options from import's (its chunks hold at most 65,536 events).
normalise::NormaliseOptions normalise_options(const ImportArgs& a) {
  normalise::NormaliseOptions opt;
  opt.codec = parse_codec(a.codec);
  opt.level = codec_level(opt.codec, a.level);
  opt.chunk_events = std::min<uint32_t>(a.chunk_events, 65536);
  return opt;
}

// A raw capture file (kept with `heaplab capture --keep-raw`, or copied from
// another machine) -> trace.
int run_import_raw(const ImportArgs& a) {
  normalise::RawFile raw(a.input);
  normalise::NormaliseOptions opt = normalise_options(a);
  normalise::NormaliseReport rep;
  write_then_rename(a.output, [&](const std::string& tmp) { rep = normalise::normalise(raw, tmp, opt); });
  fmt::print(stderr, "normalised {} calls in {} threads from {} into {} ({} bytes, {:.3f} bytes/event)\n",
             group_digits(rep.calls), rep.threads, a.input, a.output, group_digits(rep.bytes),
             rep.events ? double(rep.bytes) / double(rep.events) : 0.0);
  if (rep.unknown_frees)
    fmt::print(stderr, "heaplab: note: {} frees of memory allocated before capture were skipped\n",
               group_digits(rep.unknown_frees));
  if (rep.holes) fmt::print(stderr, "heaplab: note: {} records were lost\n", group_digits(rep.holes));
  return 0;
}

// An Intel PT recording of heaplab's ptwrite route (perf.data, from
// `heaplab capture --method pt --keep-raw` or `perf record` on another
// machine) -> trace.
int run_import_perf_pt(const ImportArgs& a) {
  pt::PtImportOptions po;
  if (!pt::parse_decoder(a.decoder, &po.decoder))
    throw Failure{"--decoder: direct, dlfilter or text, not '" + a.decoder + "'"};
  po.pid = a.pid;
  po.perf = a.perf;
  po.dlfilter = common::self_dir() + "/libheaplab_ptw_dlfilter.so";
  std::string dir = (std::filesystem::temp_directory_path() / "heaplab-import-XXXXXX").string();
  if (!mkdtemp(dir.data())) throw Failure{"cannot create a temporary directory: " + std::string(std::strerror(errno))};
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  std::string raw_path;
  const pt::PtImportReport pr = pt::decode_perf_pt(a.input, dir, po, &raw_path);
  normalise::RawFile raw(raw_path);
  normalise::NormaliseOptions opt = normalise_options(a);
  opt.capture_metadata["method"] = "intel-pt";
  opt.capture_metadata["pt"] = pt::report_to_json(pr);
  opt.capture_metadata["perf_data"] = a.input;
  normalise::NormaliseReport rep;
  write_then_rename(a.output, [&](const std::string& tmp) { rep = normalise::normalise(raw, tmp, opt); });
  fmt::print(stderr,
             "decoded {} events ({} ptwrite payloads) of process {}{} in {} thread{} with the {} decoder in {:.3f} s; "
             "wrote {} ({} bytes, {:.3f} bytes/event)\n",
             group_digits(pr.events), group_digits(pr.ptw_words), pr.pid, pr.comm.empty() ? "" : " (" + pr.comm + ")",
             pr.threads, pr.threads == 1 ? "" : "s", pt::decoder_name(pr.decoder), pr.decode_seconds, a.output,
             group_digits(rep.bytes), rep.events ? double(rep.bytes) / double(rep.events) : 0.0);
  if (pr.lost || pr.stream.overflows || pr.aux_truncated || pr.aux_gaps || pr.file_truncated_at)
    fmt::print(stderr,
               "heaplab: note: {} events lost (lost markers in the trace): {} overflow packets, {} truncated AUX "
               "records, {} AUX gaps{}\n",
               group_digits(pr.lost), pr.stream.overflows, pr.aux_truncated, pr.aux_gaps,
               pr.file_truncated_at ? fmt::format(", the file ends inside a record at byte {}", pr.file_truncated_at)
                                    : "");
  if (pr.unparsed_lines)
    fmt::print(stderr, "heaplab: note: {} lines of perf script's output were no ptwrite sample (ignored)\n",
               group_digits(pr.unparsed_lines));
  for (const pt::PtProcess& p : pr.other_processes)
    fmt::print(stderr, "heaplab: note: process {}{} has {} events too (--pid {} imports it)\n", p.pid,
               p.comm.empty() ? "" : " (" + p.comm + ")", group_digits(p.events), p.pid);
  if (rep.unknown_frees)
    fmt::print(stderr,
               "heaplab: note: {} frees of memory whose allocation is not in the trace (made before capture, or "
               "lost) were skipped\n",
               group_digits(rep.unknown_frees));
  return 0;
}

int run_import(const ImportArgs& a, const std::vector<std::string>& argv) {
  if (a.from == "heaplab-raw") return run_import_raw(a);
  if (a.from == "perf-pt") return run_import_perf_pt(a);
  if (a.from != "cmt-text")
    throw Failure{"unknown import format '" + a.from + "' (known: cmt-text, heaplab-raw, perf-pt)"};
  auto in = import::InputStream::open(a.input);
  nlohmann::json meta = import::base_metadata("import", "none", argv);
  meta["import"] = {{"from", a.from}, {"source", in->name()}, {"compression", in->compression()}};
  trace::WriterOptions opt;
  opt.codec = parse_codec(a.codec);
  opt.level = codec_level(opt.codec, a.level);
  opt.chunk_events = a.chunk_events;
  opt.metadata_json = meta.dump();
  import::CmtImportReport rep;
  uint64_t bytes = 0;
  write_then_rename(a.output, [&](const std::string& tmp) {
    trace::TraceWriter w(tmp, opt);
    w.set_thread_info(0, {0, "main"});
    rep = import::import_cmt_text(*in, w);
    meta["import"].update({{"lines", rep.lines},
                           {"events", rep.events},
                           {"unknown_frees", rep.unknown_frees},
                           {"unknown_reallocs", rep.unknown_reallocs},
                           {"reused_live_addresses", rep.reused_live},
                           {"null_results", rep.null_results}});
    w.set_final_metadata(meta.dump());
    w.close();
    bytes = w.bytes_written();
  });
  const std::string how = std::string(in->compression()) == "none" ? "" : fmt::format(" ({})", in->compression());
  fmt::print(stderr, "imported {} events from {} lines of {}{} into {} ({} bytes, {:.3f} bytes/event)\n",
             group_digits(rep.events), group_digits(rep.lines), in->name(), how, a.output,
             group_digits(bytes), rep.events ? double(bytes) / double(rep.events) : 0.0);
  if (rep.unknown_frees)
    fmt::print(stderr, "heaplab: note: {} frees of addresses never allocated were skipped (first at line {})\n",
               group_digits(rep.unknown_frees), rep.first_unknown_free_line);
  if (rep.unknown_reallocs)
    fmt::print(stderr, "heaplab: note: {} reallocs of unknown addresses were imported as realloc(NULL, n)\n",
               group_digits(rep.unknown_reallocs));
  if (rep.reused_live)
    fmt::print(stderr, "heaplab: note: {} allocations returned an address that was still live (a free is missing)\n",
               group_digits(rep.reused_live));
  return 0;
}

// ------------------------------------------------------------------ stats
int run_stats(const std::string& path, bool json) {
  auto r = open_trace(path);
  analysis::TraceStats s = analysis::compute_stats(*r);
  if (json) {
    nlohmann::json j = analysis::stats_to_json(s);
    j["trace"] = {{"path", path},
                  {"format_version", fmt::format("{}.{}", r->major_version(), r->minor_version())},
                  {"file_bytes", r->file_size()},
                  {"bytes_per_event", s.events ? double(r->file_size()) / double(s.events) : 0.0},
                  {"complete", r->complete()}};
    if (!r->complete()) j["trace"]["warning"] = r->warning();
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("trace: {} (format {}.{}, {} bytes, {:.3f} bytes/event)\n", path, r->major_version(),
               r->minor_version(), group_digits(r->file_size()),
               s.events ? double(r->file_size()) / double(s.events) : 0.0);
    fmt::print("{}", analysis::stats_to_text(s));
  }
  return 0;
}

// ------------------------------------------------------------------ check
int run_check(const std::string& path, size_t max_listed) {
  auto r = trace::TraceReader::open(path);
  analysis::CheckReport rep = analysis::check_trace(*r, max_listed);
  for (const auto& p : rep.listed)
    fmt::print("{}: seq {} (thread {}): {}\n", path, p.seq, p.thread, p.message);
  if (rep.problems > rep.listed.size())
    fmt::print("{}: ... and {} more problems\n", path, rep.problems - rep.listed.size());
  if (rep.lost_events)
    fmt::print("{}: note: the capture lost {} events (lost markers)\n", path, group_digits(rep.lost_events));
  if (rep.refs_to_lost_objects)
    fmt::print("{}: note: {} events refer to objects created in chunks the truncation lost\n", path,
               group_digits(rep.refs_to_lost_objects));
  if (!rep.ok()) {
    fmt::print(stderr, "heaplab check: {}: {} problem{} found\n", path, group_digits(rep.problems),
               rep.problems == 1 ? "" : "s");
    return kExitProblems;
  }
  fmt::print("{}: ok: {} events, {} threads, {} objects\n", path, group_digits(rep.events),
             r->active_threads().size(), group_digits(rep.objects));
  return 0;
}

// ------------------------------------------------------------------ cat
struct CatArgs {
  std::string path;
  std::string format = "text";
  int64_t thread = -1;
  uint64_t from = 0;
  uint64_t limit = UINT64_MAX;
  bool meta = false;
};

std::string obj(uint64_t id) { return id ? "#" + std::to_string(id) : "NULL"; }

void print_event_text(const trace::Event& e, bool has_time, std::string& line) {
  line.clear();
  fmt::format_to(std::back_inserter(line), "{} t{} ", e.seq, e.thread);
  if (has_time) fmt::format_to(std::back_inserter(line), "@{} ", e.time);
  line += trace::op_name(e.op);
  const uint8_t f = trace::op_info(e.op).fields;
  std::vector<std::string> args;
  if (f & trace::kConsumes) args.push_back(obj(e.old));
  if (f & trace::kCount) args.push_back(std::to_string(e.count));
  if (f & trace::kSize) args.push_back(std::to_string(e.size));
  if (f & trace::kAlign) args.push_back("align=" + std::to_string(e.align));
  line += "(";
  for (size_t i = 0; i < args.size(); ++i) line += (i ? ", " : "") + args[i];
  line += ")";
  if (f & trace::kProduces) {
    line += " = " + obj(e.id);
    if (e.flags & trace::kFailed) line += " (failed)";
  }
  line += "\n";
}

void print_event_json(const trace::Event& e, bool has_time, std::string& line) {
  nlohmann::json j = {{"seq", e.seq}, {"thread", e.thread}, {"op", trace::op_name(e.op)}};
  if (has_time) j["time"] = e.time;
  const uint8_t f = trace::op_info(e.op).fields;
  if (f & trace::kConsumes) j["old"] = e.old;
  if (f & trace::kCount) j["count"] = e.count;
  if (f & trace::kSize) j["size"] = e.size;
  if (f & trace::kAlign) j["align"] = e.align;
  if (f & trace::kProduces) j["id"] = e.id;
  if (e.flags & trace::kFailed) j["failed"] = true;
  line = j.dump();
  line += "\n";
}

int run_cat(const CatArgs& a) {
  auto r = open_trace(a.path);
  if (a.meta) {
    nlohmann::json m = nlohmann::json::parse(r->metadata(), nullptr, false);
    fmt::print("{}\n", m.is_discarded() ? r->metadata() : m.dump(2));
    return 0;
  }
  std::unique_ptr<trace::EventCursor> cur;
  if (a.thread < -1) throw Failure{fmt::format("--thread: no thread {}", a.thread)};
  if (a.thread >= 0) {
    if (a.thread > UINT32_MAX || r->thread_chunks(static_cast<uint32_t>(a.thread)).empty())
      throw Failure{fmt::format("{}: no thread {} (the trace has {})", a.path, a.thread,
                                r->active_threads().size())};
    cur = std::make_unique<trace::ThreadCursor>(*r, static_cast<uint32_t>(a.thread));
  } else {
    cur = std::make_unique<trace::MergedCursor>(*r);
  }
  const bool json = a.format == "jsonl";
  std::vector<trace::Event> buf(4096);
  std::string line, out;
  uint64_t shown = 0;
  while (size_t n = cur->next(buf.data(), buf.size())) {
    for (size_t i = 0; i < n && shown < a.limit; ++i) {
      if (buf[i].seq < a.from) continue;
      json ? print_event_json(buf[i], r->has_time(), line) : print_event_text(buf[i], r->has_time(), line);
      out += line;
      ++shown;
    }
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) return 0;  // closed pipe
    out.clear();
    if (shown >= a.limit) break;
  }
  return 0;
}

// ------------------------------------------------------------------ capture
struct CaptureArgs {
  launch::CaptureOptions opt;
  std::string codec = "zstd";
  int level = 0;
  bool follow = false;
  bool quiet = false;
};

int run_capture(CaptureArgs& a, std::vector<std::string> command) {
  a.opt.argv = std::move(command);
  if (a.follow) a.opt.follow_fork = a.opt.follow_exec = true;
  if (a.opt.output.empty() && !a.opt.argv.empty())
    a.opt.output = std::filesystem::path(a.opt.argv[0]).filename().string() + ".hlt";
  a.opt.normalise.codec = parse_codec(a.codec);
  a.opt.normalise.level = codec_level(a.opt.normalise.codec, a.level);
  launch::CaptureResult r;
  try {
    r = launch::run_capture(a.opt);
  } catch (const launch::LaunchError& e) {
    throw Failure{std::string("capture: ") + e.what()};
  }
  if (!a.quiet || !r.failed.empty() || r.traces.empty() || !r.notes.empty())
    fmt::print(stderr, "{}", launch::summary(r, a.opt));
  if (!r.failed.empty() || r.traces.empty()) return kExitBadInput;
  return r.exit_code;
}

struct ReplayArgs {
  replay::ReplayOptions opt;
  std::string out;
  bool list = false;
  bool quiet = false;
  bool json = false;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> v;
  size_t from = 0;
  for (;;) {
    const size_t comma = s.find(',', from);
    v.push_back(s.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) return v;
    from = comma + 1;
  }
}

// Writes `text` to `path` (via a temporary renamed into place); a failure
// is "PREFIXcannot write 'PATH'".
void write_text(const std::string& path, const std::string& text, const std::string& prefix) {
  write_then_rename(path, [&](const std::string& tmp) {
    FILE* f = std::fopen(tmp.c_str(), "w");
    const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if ((f && std::fclose(f) != 0) || !ok) throw Failure{prefix + "cannot write '" + path + "'"};
  });
}

// Several allocators (or load modes): one replay each, in turn, each its own
// process; then one table side by side. With `all`, allocators that are not
// installed (or a replayer not built) are listed as skipped; a list named
// by hand must all run.
int run_replays(const ReplayArgs& a, const std::vector<std::string>& allocs,
                const std::vector<std::string>& loads, bool all) {
  if (!all)  // a name that cannot run stops everything before anything runs
    for (const std::string& alloc : allocs) {
      std::string err;
      if (!allocators::resolve_allocator(alloc, err)) throw Failure{"replay: " + err};
    }
  std::vector<nlohmann::json> results;
  int worst = 0;
  for (const std::string& alloc : allocs) {
    for (const std::string& load : loads) {
      replay::ReplayOptions opt = a.opt;
      opt.allocator = alloc;
      opt.load = load;
      if (!a.quiet && !a.json) fmt::print(stderr, "heaplab: replaying on {} ({})\n", alloc, load);
      replay::ReplayOutcome o;
      try {
        o = replay::run_replay(opt);
      } catch (const replay::ReplayError& e) {
        if (!all) throw Failure{std::string("replay: ") + alloc + " (" + load + "): " + e.what()};
        results.push_back({{"allocator", {{"name", alloc}, {"load", load}}}, {"skipped", e.what()}});
        continue;
      }
      if (o.exit_code != 0) {
        o.result["error"] = o.error;
        fmt::print(stderr, "heaplab: error: replay on {} ({}): {}\n", alloc, load, o.error);
      }
      worst = std::max(worst, o.exit_code);
      results.push_back(std::move(o.result));
    }
  }
  const std::string text = nlohmann::json(results).dump(2) + "\n";
  if (!a.out.empty()) write_text(a.out, text, "replay: ");
  if (a.json) fmt::print("{}", text);
  else if (!a.quiet) fmt::print("{}", replay::comparison_table(results));
  return worst;
}

int run_replay(const ReplayArgs& a) {
  if (a.list) {
    fmt::print("{}", replay::list_allocators());
    return 0;
  }
  if (a.opt.trace.empty()) throw Failure{"replay: no trace given (heaplab replay TRACE --allocator NAME)"};
  const bool all = a.opt.allocator == "all";
  std::vector<std::string> allocs;
  if (all)
    for (const auto& k : allocators::known_allocators()) allocs.push_back(k.name);
  else
    allocs = split_commas(a.opt.allocator);
  for (const std::string& n : allocs)
    if (n.empty()) throw Failure{"replay: --allocator: an empty name in '" + a.opt.allocator + "'"};
  const std::vector<std::string> loads =
      a.opt.load == "both" ? std::vector<std::string>{"preload", "direct"} : split_commas(a.opt.load);
  for (const std::string& l : loads)
    if (l != "preload" && l != "direct")
      throw Failure{"replay: --load: expected preload, direct or both, not '" + l + "'"};
  if (allocs.size() * loads.size() > 1 || all) return run_replays(a, allocs, loads, all);
  replay::ReplayOutcome o;
  try {
    o = replay::run_replay(a.opt);
  } catch (const replay::ReplayError& e) {
    throw Failure{std::string("replay: ") + e.what()};
  }
  const std::string text = o.result.dump(2) + "\n";
  if (!a.out.empty()) write_text(a.out, text, "replay: ");
  if (a.json) fmt::print("{}", text);
  else if (!a.quiet && o.exit_code != 2) fmt::print("{}", replay::result_summary(o.result));
  if (o.exit_code != 0) fmt::print(stderr, "heaplab: error: replay: {}\n", o.error);
  return o.exit_code;
}

// --- experiments: heaplab run / report / results -----------------------------

struct RunArgs {
  std::string file;
  experiments::RunnerOptions opt;
};

struct ReportArgs {
  std::string results = "results", session, experiment, out, plots;
  experiments::ReportOptions opt;
};

struct ResultsArgs {
  std::string results = "results", session, format = "csv", out;
  std::vector<std::string> stores;
};

std::string store_path(const std::string& dir) { return dir + "/heaplab.db"; }

void write_or_print(const std::string& out, const std::string& text) {
  if (out.empty()) fmt::print("{}", text);
  else write_text(out, text, "");
}

std::string session_report(experiments::Store& store, const experiments::SessionInfo& s,
                           experiments::ReportOptions opt) {
  if (opt.baseline.empty()) opt.baseline = s.baseline;
  if (opt.title.empty()) opt.title = fmt::format("experiment {} (session {}, {} of {} runs)", s.experiment, s.id,
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
  experiments::RunnerResult r;
  try {
    r = experiments::run_experiment(spec, a.opt);
  } catch (const experiments::SpecError& e) {
    throw Failure{e.what()};
  } catch (const std::runtime_error& e) {  // RunError, StoreError
    fmt::print(stderr, "heaplab: error: {}\n", e.what());
    return 1;
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
  write_or_print(a.out, session_report(store, s, a.opt));
  if (!a.plots.empty()) {
    std::vector<std::string> metrics = a.opt.metrics;
    if (metrics.empty()) metrics = experiments::default_metrics();
    for (const std::string& p : experiments::write_plots(store, s.id, metrics, a.plots))
      fmt::print(stderr, "heaplab: plot {}\n", p);
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
  return 0;
}

int run_results_cmd(const std::string& what, const ResultsArgs& a) {
  std::error_code ec;
  if (what == "merge") {
    std::filesystem::create_directories(a.results, ec);
    experiments::Store store(store_path(a.results));
    for (const std::string& other : a.stores) {
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
  if (a.format == "csv") write_or_print(a.out, experiments::export_csv(store, s.id));
  else if (a.format == "gbench") write_or_print(a.out, experiments::export_gbench(store, s.id));
  else throw Failure{"results export: --format: expected csv or gbench, not '" + a.format + "'"};
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGCHLD, SIG_DFL);  // an ignored SIGCHLD (inherited) would make every wait for a child fail
  std::vector<std::string> args(argv, argv + argc);
  CLI::App app{"heaplab: capture, normalise and replay heap traces to compare allocators", "heaplab"};
  app.set_version_flag("--version", std::string("heaplab ") + import::tool_version() +
                                        fmt::format(" (trace format {}.{})", trace::kFormatMajor,
                                                    trace::kFormatMinor));
  app.require_subcommand(1);

  ImportArgs ia;
  auto* imp = app.add_subcommand("import", "Convert another tool's trace into a heaplab trace");
  imp->add_option("--from", ia.from,
                  "Input format: cmt-text (Compact Memory Traces text), heaplab-raw (a .hlraw capture file) or "
                  "perf-pt (a perf.data of heaplab's Intel PT route)")
      ->required();
  imp->add_option("--decoder", ia.decoder, "perf-pt: direct (fastest), dlfilter or text (both run perf script)")
      ->check(CLI::IsMember({"direct", "dlfilter", "text"}))->capture_default_str();
  imp->add_option("--pid", ia.pid, "perf-pt: the process to import (default: the one with the most events)");
  imp->add_option("--perf", ia.perf, "perf-pt: the perf binary (dlfilter and text decoders)")->capture_default_str();
  imp->add_option("input", ia.input, "Input file (plain, .gz, .bz2, .xz or .zst), or - for stdin")->required();
  imp->add_option("-o,--output", ia.output, "Output trace (.hlt)")->required();
  imp->add_option("--codec", ia.codec, "Chunk compression: zstd (smallest), lz4 (fastest) or none")
      ->check(CLI::IsMember({"zstd", "lz4", "none"}))->capture_default_str();
  imp->add_option("--level", ia.level, "zstd level 1..22 (default 3), or lz4 acceleration (default 1)")
      ->check(CLI::Range(1, 65537));
  imp->add_option("--chunk-events", ia.chunk_events, "Events per chunk")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();

  std::string stats_path;
  bool stats_json = false;
  auto* st = app.add_subcommand("stats", "Summarise a trace: operations, threads, sizes, lifetimes, peaks");
  st->add_option("trace", stats_path, "Trace file")->required();
  st->add_flag("--json", stats_json, "Print JSON instead of text");

  std::string check_path;
  size_t check_max = 20;
  auto* ck = app.add_subcommand("check", "Validate a trace; exit 1 if it has problems");
  ck->add_option("trace", check_path, "Trace file")->required();
  ck->add_option("--max-problems", check_max, "How many problems to list")->capture_default_str();

  CatArgs ca;
  auto* ct = app.add_subcommand("cat", "Print a trace's events as text");
  ct->add_option("trace", ca.path, "Trace file")->required();
  ct->add_option("--format", ca.format, "text or jsonl")->check(CLI::IsMember({"text", "jsonl"}))->capture_default_str();
  ct->add_option("--thread", ca.thread, "Only this thread's events");
  ct->add_option("--from", ca.from, "Start at this seq");
  ct->add_option("-n,--limit", ca.limit, "Print at most this many events");
  ct->add_flag("--meta", ca.meta, "Print the metadata JSON instead of events");

  CaptureArgs cap_args;
  std::vector<std::string> cap_command;
  auto* cap = app.add_subcommand("capture",
                                 "Run a program under the capture shim and write its heap trace\n"
                                 "  heaplab capture [options] [--] PROGRAM [ARGS...]\n"
                                 "Exits with the program's status (128+N if killed by signal N), 2 on errors.");
  cap->add_option("-o,--output", cap_args.opt.output, "Output trace (default: PROGRAM.hlt)");
  cap->add_option("--allocator", cap_args.opt.allocator,
                  "Allocator to run the program on: glibc (default), jemalloc, mimalloc, tcmalloc or a .so path");
  cap->add_flag("--follow-fork", cap_args.opt.follow_fork, "Capture fork children too (a trace each)");
  cap->add_flag("--follow-exec", cap_args.opt.follow_exec, "Capture programs exec'd by the program too (a trace each)");
  cap->add_flag("--follow", cap_args.follow, "Both --follow-fork and --follow-exec");
  cap->add_option("--raw-dir", cap_args.opt.raw_dir, "Where raw capture files go (default: OUTPUT.raw.PID)");
  cap->add_flag("--keep-raw", cap_args.opt.keep_raw, "Keep the raw files (heaplab import --from heaplab-raw reads them)");
  cap->add_option("--clock", cap_args.opt.clock, "Timestamps: auto (invariant TSC if present), tsc or monotonic")
      ->check(CLI::IsMember({"auto", "tsc", "monotonic"}))->capture_default_str();
  cap->add_option("--codec", cap_args.codec, "Trace compression: zstd, lz4 or none")
      ->check(CLI::IsMember({"zstd", "lz4", "none"}))->capture_default_str();
  cap->add_option("--level", cap_args.level, "zstd level 1..22 (default 3), or lz4 acceleration")
      ->check(CLI::Range(1, 65537));
  cap->add_flag("-q,--quiet", cap_args.quiet, "No summary");
  cap->add_option("--method", cap_args.opt.method,
                  "software (the shim writes per-thread files) or pt (ptwrite into Intel PT, recorded by perf "
                  "record, decoded afterwards; needs a CPU with ptwrite)")
      ->check(CLI::IsMember({"software", "pt"}))->capture_default_str();
  cap->add_option("--pt-fallback", cap_args.opt.pt_fallback,
                  "--method pt on a machine without Intel PT or ptwrite: refuse, or record with --method software")
      ->check(CLI::IsMember({"refuse", "software"}))->capture_default_str();
  cap->add_option("--pt-buffers", cap_args.opt.pt.buffers,
                  "per-cpu (every thread; context-switch sideband) or per-thread (perf --per-thread: "
                  "threads started later are not traced)")
      ->check(CLI::IsMember({"per-cpu", "per-thread"}))->capture_default_str();
  cap->add_option("--pt-aux-kib", cap_args.opt.pt.aux_kib, "AUX buffer per CPU or thread, KiB (default: perf's)");
  cap->add_option("--pt-snapshot", cap_args.opt.pt.snapshot,
                  "Snapshot mode (perf -S): 'on' or a size (e.g. 64M); only the newest trace is kept");
  cap->add_option("--pt-control", cap_args.opt.pt.control, "perf record --control, e.g. fifo:ctl.fifo,ack.fifo");
  cap->add_option("--pt-psb-period", cap_args.opt.pt.psb_period, "intel_pt psb_period 0..15 (default: perf's)");
  cap->add_option("--pt-decoder", cap_args.opt.pt_decoder,
                  "How to decode the recording: direct (fastest), dlfilter or text (both through perf script)")
      ->check(CLI::IsMember({"direct", "dlfilter", "text"}))->capture_default_str();
  cap->add_option("--perf", cap_args.opt.pt.perf, "The perf binary")->capture_default_str();
  // Everything from the first argument that is not an option of ours on (or
  // after `--`) is the program and its arguments.
  cap->prefix_command();

  ReplayArgs ra;
  auto* rp = app.add_subcommand("replay",
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
  rp->add_option("--threads", ra.opt.threads,
                 "Replay threads (default: one per recorded thread; fewer folds recorded threads)")
      ->check(CLI::Range(1u, 1u << 20));
  rp->add_option("--touch", ra.opt.touch,
                 "Write allocated memory: none, first (byte), pages (a byte per page) or all")
      ->check(CLI::IsMember({"none", "first", "pages", "all"}))->capture_default_str();
  rp->add_option("--timing", ra.opt.timing, "fast (as fast as possible) or recorded (the trace's pace)")
      ->check(CLI::IsMember({"fast", "recorded"}))->capture_default_str();
  rp->add_option("--speed", ra.opt.speed, "With --timing recorded: replay this many times faster")
      ->check(CLI::PositiveNumber);
  rp->add_option("--latency", ra.opt.latency,
                 "Time every Nth call (1: all; 0: none, the default) into per-op latency percentiles")
      ->check(CLI::Range(0u, 1u << 30));
  rp->add_option("--sample-ms", ra.opt.sample_ms,
                 "Sample RSS and live bytes every N ms (0: at the start and the end only)")
      ->check(CLI::Range(0u, 3600000u))->capture_default_str();
  rp->add_option("--pin", ra.opt.pin,
                 "Bind replay threads (hwloc): none, compact, scatter, or CPU numbers such as 0,1")
      ->capture_default_str();
  rp->add_flag("!--no-memory", ra.opt.memory,
               "No memory measurement (no sampler, no live-bytes sums in the plan): wall time and calls only");
  rp->add_option("--membind", ra.opt.membind,
                 "Bind the replay's memory (NUMA, hwloc): none, local (the pinned CPUs' nodes), interleave, "
                 "or node numbers such as 0,1")
      ->capture_default_str();
  rp->add_option("-o,--out", ra.out, "Write the result JSON here");
  rp->add_flag("--json", ra.json, "Print the result JSON instead of the summary");
  rp->add_flag("-q,--quiet", ra.quiet, "No summary");
  rp->add_flag("--list-allocators", ra.list, "List the allocators and load modes available, and why not");

  RunArgs runa;
  auto* run = app.add_subcommand("run",
                                 "Run an experiment file: its traces x allocators x repetitions, into the results store\n"
                                 "  heaplab run experiments/quick-start.yaml [--results DIR] [--shard K/N]\n"
                                 "Resumes an interrupted run of the same file. Exits 0 when every run was faithful, "
                                 "1 if some failed, 2 on errors, 130 when interrupted.");
  run->add_option("file", runa.file, "Experiment file (YAML)")->required();
  run->add_option("--results", runa.opt.results_dir, "Results directory (the store is DIR/heaplab.db)")
      ->capture_default_str();
  run->add_option("--shard", runa.opt.shard, "Run only every N-th run, the K-th slice (K/N, 1-based)");
  run->add_option("--session", runa.opt.session, "Session id to start or resume (default: resume or a new one)");
  run->add_flag("--new", runa.opt.fresh, "Start a new session even if an unfinished one matches");
  run->add_flag("-q,--quiet", runa.opt.quiet, "No progress and no report");

  ReportArgs repa;
  auto* rep = app.add_subcommand("report", "Compare the allocators of a stored session: medians, spread, ratio to "
                                           "the baseline, significance (Mann-Whitney U)");
  rep->add_option("--results", repa.results, "Results directory")->capture_default_str();
  rep->add_option("--session", repa.session, "Session id (default: the newest)");
  rep->add_option("--experiment", repa.experiment, "The newest session of this experiment");
  rep->add_option("--format", repa.opt.format, "table, md, csv or json")
      ->check(CLI::IsMember({"table", "md", "csv", "json"}))->capture_default_str();
  rep->add_option("--metric", repa.opt.metrics, "Metrics to report (repeatable; default: the experiment's)");
  rep->add_option("--baseline", repa.opt.baseline, "Allocator label to compare against (default: the experiment's)");
  rep->add_option("--alpha", repa.opt.alpha, "Significance level")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  rep->add_option("-o,--out", repa.out, "Write the report here");
  rep->add_option("--plots", repa.plots, "Also write SVG plots here: heap over time, latency curves, bars per metric");

  std::string dash_results = "results", dash_out;
  auto* dash = app.add_subcommand("dashboard", "Write a static HTML dashboard of the results store (opens offline): "
                                               "history per metric, regressions flagged, drill-down per session");
  dash->add_option("--results", dash_results, "Results directory")->capture_default_str();
  dash->add_option("-o,--out", dash_out, "Directory of the site (index.html); default: RESULTS/dashboard");

  ResultsArgs resa;
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

  // `heaplab capture [options] -- PROGRAM ARGS`: what follows `--` is the
  // program's, never parsed as ours (without `--`, the first argument that is
  // not one of our options starts the program: prefix_command below).
  std::vector<std::string> after_dashes;
  bool dashes = false;
  std::vector<char*> ours(argv, argv + argc);
  if (argc > 1 && std::string(argv[1]) == "capture") {
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "--") {
        after_dashes.assign(argv + i + 1, argv + argc);
        ours.resize(size_t(i));
        dashes = true;
        break;
      }
  }

  try {
    app.parse(int(ours.size()), ours.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "heaplab: error: {}\nRun 'heaplab --help' for usage.\n", e.what());
    return kExitBadInput;
  }

  try {
    if (*imp) return run_import(ia, args);
    if (*st) return run_stats(stats_path, stats_json);
    if (*ck) return run_check(check_path, check_max);
    if (*ct) return run_cat(ca);
    if (*rp) return run_replay(ra);
    if (*run) return run_experiment_cmd(runa);
    if (*rep) return run_report_cmd(repa);
    if (*dash) return run_dashboard_cmd(dash_results, dash_out);
    if (*res_list) return run_results_cmd("list", resa);
    if (*res_merge) return run_results_cmd("merge", resa);
    if (*res_export) return run_results_cmd("export", resa);
    if (*cap) {
      cap_command = dashes ? after_dashes : cap->remaining();
      if (dashes && !cap->remaining().empty())
        throw Failure{"capture: unexpected arguments before --: " + cap->remaining().front()};
      return run_capture(cap_args, cap_command);
    }
  } catch (const Failure& f) {
    fmt::print(stderr, "heaplab: error: {}\n", f.message);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "heaplab: error: out of memory\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "heaplab: error: {}\n", e.what());
  }
  return kExitBadInput;
}
