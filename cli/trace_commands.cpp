// heaplab import / stats / check / cat: traces in, text out.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <fmt/core.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/event_text.h"
#include "analysis/perfetto.h"
#include "analysis/trace_check.h"
#include "analysis/trace_stats.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_writer.h"
#include "capture/import/cmt_text.h"
#include "capture/import/heaptrack.h"
#include "capture/import/logalloc.h"
#include "capture/import/mtrace.h"
#include "capture/normalise/normalise.h"
#include "capture/pt/pt_import.h"
#include "cli/cli.h"
#include "common/files.h"
#include "common/text.h"
#include "common/json.h"

namespace heaplab::cli {
namespace {

using common::group_digits;

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
  const normalise::NormaliseReport rep = normalise::normalise_file(a.input, a.output, normalise_options(a));
  fmt::print(stderr, "normalised {} calls in {} thread{} from {} into {} ({} bytes, {:.3f} bytes/event)\n",
             group_digits(rep.calls), group_digits(rep.threads), rep.threads == 1 ? "" : "s", a.input, a.output,
             group_digits(rep.bytes), rep.events ? double(rep.bytes) / double(rep.events) : 0.0);
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
  const pt::PtFileImport im = pt::import_perf_pt_file(a.input, a.output, po, normalise_options(a));
  const pt::PtImportReport& pr = im.pt;
  const normalise::NormaliseReport& rep = im.trace;
  fmt::print(stderr,
             "decoded {} events ({} ptwrite payloads) of process {}{} in {} thread{} with the {} decoder in {:.3f} s; "
             "wrote {} ({} bytes, {:.3f} bytes/event)\n",
             group_digits(pr.events), group_digits(pr.ptw_words), pr.pid, pr.comm.empty() ? "" : " (" + pr.comm + ")",
             group_digits(pr.threads), pr.threads == 1 ? "" : "s", pt::decoder_name(pr.decoder), pr.decode_seconds,
             a.output, group_digits(rep.bytes), rep.events ? double(rep.bytes) / double(rep.events) : 0.0);
  if (pr.lost || pr.stream.overflows || pr.aux_truncated || pr.aux_gaps || pr.file_truncated_at)
    fmt::print(
        stderr,
        "heaplab: note: {} events lost (lost markers in the trace): {} overflow packets, {} truncated AUX "
        "records, {} AUX gaps{}\n",
        group_digits(pr.lost), pr.stream.overflows, pr.aux_truncated, pr.aux_gaps,
        pr.file_truncated_at ? fmt::format(", the file ends inside a record at byte {}", pr.file_truncated_at) : "");
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

// What an import of another tool's file made: "imported E events[ WHAT]
// from L lines of SOURCE[ (COMPRESSION)][ (EXTRA)] into OUTPUT (B bytes, X
// bytes/event)".
void print_imported(const import::ImportedFile& im, uint64_t events, const std::string& what, uint64_t lines,
                    const std::string& extra, const std::string& output) {
  fmt::print(stderr, "imported {} events{} from {} lines of {}{}{} into {} ({} bytes, {:.3f} bytes/event)\n",
             group_digits(events), what, group_digits(lines), im.source,
             im.compression == "none" ? "" : fmt::format(" ({})", im.compression),
             extra.empty() ? "" : " (" + extra + ")", output, group_digits(im.bytes),
             events ? double(im.bytes) / double(events) : 0.0);
  if (events == 0)
    fmt::print(stderr,
               "heaplab: note: {} held no heap calls: the trace is empty (the wrong file, or a log cut "
               "before its first call?)\n",
               im.source);
}

// "heaplab: note: N TEXT" when N is not 0.
void note(uint64_t n, const std::string& text) {
  if (n) fmt::print(stderr, "heaplab: note: {} {}\n", group_digits(n), text);
}

// glibc's mtrace(3) log -> trace.
int run_import_mtrace(const ImportArgs& a, const std::vector<std::string>& argv, const trace::WriterOptions& opt) {
  const import::MtraceFileImport im = import::import_mtrace_file(a.input, a.output, opt, argv);
  const import::MtraceImportReport& rep = im.report;
  print_imported(im, rep.events, "", rep.lines, "", a.output);
  fmt::print(stderr,
             "heaplab: note: mtrace records no threads, no times and not which call made a block: every call is on "
             "one thread, every allocation a malloc\n");
  note(rep.unknown_frees,
       fmt::format("frees of blocks allocated before mtrace() started were skipped (first at line {})",
                   rep.first_unknown_free_line));
  note(rep.unknown_reallocs, "reallocs of such blocks were imported as realloc(NULL, n)");
  note(rep.unpaired_reallocs, "realloc lines ('<') had no result line ('>')");
  note(rep.reused_live,
       "allocations returned an address that was still live (a free is missing, or in a threaded program mtrace "
       "logged a realloc after another thread's allocation at its old address)");
  return 0;
}

// A heaptrack recording (.zst) -> trace.
int run_import_heaptrack(const ImportArgs& a, const std::vector<std::string>& argv, const trace::WriterOptions& opt) {
  const import::HeaptrackFileImport im = import::import_heaptrack_file(a.input, a.output, opt, argv);
  const import::HeaptrackImportReport& rep = im.report;
  print_imported(im, rep.events,
                 fmt::format(" ({} allocations, {} deallocations)", group_digits(rep.allocations),
                             group_digits(rep.deallocations)),
                 rep.lines, rep.command, a.output);
  fmt::print(stderr,
             "heaplab: note: heaptrack records no threads, no failed calls and only the kind (size, backtrace) of a "
             "freed block: every call is on one thread, every allocation a malloc, a free takes the newest block of "
             "its kind, times are to the ms\n");
  note(rep.unknown_frees,
       fmt::format("deallocations of blocks allocated before heaptrack started were skipped (first at line {})",
                   rep.first_unknown_free_line));
  note(rep.other_records, "records of kinds heaplab does not know were skipped (a newer heaptrack?)");
  return 0;
}

// Firefox's logalloc log -> trace (threads kept).
int run_import_logalloc(const ImportArgs& a, const std::vector<std::string>& argv, const trace::WriterOptions& opt) {
  const import::LogallocFileImport im = import::import_logalloc_file(a.input, a.output, opt, argv);
  const import::LogallocImportReport& rep = im.report;
  print_imported(
      im, rep.events,
      fmt::format(" in {} thread{} of process {}", group_digits(rep.threads), rep.threads == 1 ? "" : "s", rep.pid),
      rep.lines, "", a.output);
  fmt::print(stderr, "heaplab: note: logalloc records no times; arenas are replayed as one heap\n");
  note(rep.other_process_lines, "lines of other processes (fork children) were not imported");
  note(rep.unknown_frees, fmt::format("frees of blocks never allocated in the log were skipped (first at line {})",
                                      rep.first_unknown_free_line));
  note(rep.unknown_reallocs, "reallocs of such blocks were imported as realloc(NULL, n)");
  note(rep.reused_live, "allocations returned an address that was still live (a free is missing)");
  return 0;
}

int run_import(const ImportArgs& a, const std::vector<std::string>& argv) {
  if (std::string why = common::output_is_input(a.output, {a.input, a.input + ".blocks"}); !why.empty())
    throw Failure{"import: " + why};
  if (a.from == "heaplab-raw") return run_import_raw(a);
  if (a.from == "perf-pt") return run_import_perf_pt(a);
  if (a.from != "cmt-text" && a.from != "mtrace" && a.from != "heaptrack" && a.from != "logalloc")
    throw Failure{"unknown import format '" + a.from +
                  "' (known: cmt-text, heaplab-raw, heaptrack, logalloc, mtrace, perf-pt)"};
  trace::WriterOptions opt;
  opt.codec = parse_codec(a.codec);
  opt.level = codec_level(opt.codec, a.level);
  opt.chunk_events = a.chunk_events;
  if (a.from == "mtrace") return run_import_mtrace(a, argv, opt);
  if (a.from == "heaptrack") return run_import_heaptrack(a, argv, opt);
  if (a.from == "logalloc") return run_import_logalloc(a, argv, opt);
  const import::CmtFileImport im = import::import_cmt_file(a.input, a.output, opt, argv);
  const import::CmtImportReport& rep = im.report;
  print_imported(im, rep.events, "", rep.lines, "", a.output);
  note(rep.unknown_frees,
       fmt::format("frees of addresses never allocated were skipped (first at line {})", rep.first_unknown_free_line));
  note(rep.unknown_reallocs, "reallocs of unknown addresses were imported as realloc(NULL, n)");
  note(rep.reused_live, "allocations returned an address that was still live (a free is missing)");
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
    fmt::print("trace: {} (format {}.{}, {} bytes, {:.3f} bytes/event)\n", path, r->major_version(), r->minor_version(),
               group_digits(r->file_size()), s.events ? double(r->file_size()) / double(s.events) : 0.0);
    fmt::print("{}", analysis::stats_to_text(s));
  }
  return 0;
}

// ------------------------------------------------------------------ check
int run_check(const std::string& path, size_t max_listed) {
  auto r = trace::TraceReader::open(path);
  analysis::CheckReport rep = analysis::check_trace(*r, max_listed);
  for (const auto& p : rep.listed) fmt::print("{}: seq {} (thread {}): {}\n", path, p.seq, p.thread, p.message);
  if (rep.problems > rep.listed.size())
    fmt::print("{}: ... and {} more problems\n", path, rep.problems - rep.listed.size());
  if (rep.lost_events)
    fmt::print("{}: the capture lost {} events (lost markers): the trace is not the program's whole run\n", path,
               group_digits(rep.lost_events));
  if (rep.odd_alignments)
    fmt::print(
        "{}: note: {} calls succeeded with an alignment their call does not take (not a power of two, or for "
        "posix_memalign below a pointer's size: glibc's memalign and aligned_alloc round it up, its posix_memalign "
        "fails; replays use the next one taken)\n",
        path, group_digits(rep.odd_alignments));
  if (rep.mismatches_after_loss)
    fmt::print(
        "{}: note: {} sized or aligned deletes after lost events name another size or alignment than "
        "their object's\n",
        path, group_digits(rep.mismatches_after_loss));
  if (rep.refs_to_lost_objects)
    fmt::print("{}: note: {} events refer to objects created in chunks the truncation lost\n", path,
               group_digits(rep.refs_to_lost_objects));
  if (!rep.ok()) {
    fmt::print(stderr, "heaplab check: {}: {} problem{} found\n", path, group_digits(rep.problems),
               rep.problems == 1 ? "" : "s");
    return kExitProblems;
  }
  if (rep.lost_events) {  // a consistent trace, but not all of what the program did
    fmt::print(stderr, "heaplab check: {}: {} events lost in capture\n", path, group_digits(rep.lost_events));
    return kExitProblems;
  }
  const size_t threads = r->active_threads().size();
  fmt::print("{}: ok: {} events, {} thread{}, {} objects\n", path, group_digits(rep.events), group_digits(threads),
             threads == 1 ? "" : "s", group_digits(rep.objects));
  return 0;
}

struct CatArgs {
  std::string path;
  std::string format = "text";
  std::optional<int64_t> thread;  // none: every thread
  uint64_t from = 0;
  uint64_t limit = UINT64_MAX;
  bool meta = false;
  bool memory = false;
  bool annotate = false;
};

int run_cat(const CatArgs& a) {
  auto r = open_trace(a.path);
  if (a.meta) {
    if (a.memory || a.annotate || a.thread || a.from != 0 || a.limit != UINT64_MAX || a.format != "text")
      throw Failure{
          "cat: --meta prints the metadata alone: none of --memory, --annotate, --thread, --from, -n, "
          "--format with it"};
    nlohmann::json m = common::parse_bounded_json(r->metadata());
    fmt::print("{}\n", m.is_discarded() ? r->metadata() : m.dump(2));
    return 0;
  }
  if (a.memory) {
    // --thread, --from (records after that seq) and -n as for heap events;
    // the objects' resident counts (no thread, no place) only without them.
    if (a.annotate) throw Failure{"cat: --annotate is for heap events, not --memory"};
    if (a.thread && (*a.thread < 0 || *a.thread >= int64_t(r->thread_count())))
      throw Failure{fmt::format("{}: no thread {} (the trace has {})", a.path, *a.thread, r->thread_count())};
    std::string line, out;
    uint64_t shown = 0;
    trace::MemoryCursor memory(*r);
    for (const trace::MemoryEvent* e; shown < a.limit && (e = memory.next()) != nullptr;) {
      if (e->op == trace::MemOp::object ? (a.thread || a.from != 0)
                                        : ((a.thread && e->thread != uint64_t(*a.thread)) || e->after < a.from))
        continue;
      a.format == "jsonl" ? analysis::memory_event_jsonl(*e, r->has_time(), line)
                          : analysis::memory_event_text(*e, r->has_time(), line);
      ++shown;
      out += line;
      if (out.size() >= (size_t{1} << 16)) {
        if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) output_failed();
        out.clear();
      }
    }
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) output_failed();
    return 0;
  }
  std::unique_ptr<trace::EventCursor> cur;
  const int64_t thread = a.thread.value_or(-1);  // -1: every thread
  if (a.thread && *a.thread < 0) throw Failure{fmt::format("--thread: no thread {}", *a.thread)};
  if (thread >= 0 && (thread > UINT32_MAX || r->thread_chunks(static_cast<uint32_t>(thread)).empty()))
    throw Failure{fmt::format("{}: no thread {} (the trace has {})", a.path, thread, r->active_threads().size())};
  // Annotated, every event is seen (an object another thread or an earlier
  // event made), and only the chosen ones printed.
  if (thread >= 0 && !a.annotate)
    cur = std::make_unique<trace::ThreadCursor>(*r, static_cast<uint32_t>(thread));
  else
    cur = std::make_unique<trace::MergedCursor>(*r);
  const bool json = a.format == "jsonl";
  analysis::LifetimeAnnotator lifetimes;
  // A replay's addresses (heaplab replay --emit-trace), if the trace has them.
  trace::AddressCursor addresses(*r);
  const bool has_addresses = r->has_addresses();
  std::vector<trace::Event> buf(4096);
  std::string line, out;
  uint64_t shown = 0;
  while (size_t n = cur->next(buf.data(), buf.size())) {
    for (size_t i = 0; i < n && shown < a.limit; ++i) {
      const analysis::LifetimeAnnotator::Age age =
          a.annotate ? lifetimes.observe(buf[i]) : analysis::LifetimeAnnotator::Age{};
      if (buf[i].seq < a.from || (thread >= 0 && buf[i].thread != thread)) continue;
      const uint64_t address = has_addresses ? addresses.at(buf[i].seq) : 0;
      json ? analysis::event_jsonl(buf[i], r->has_time(), line, address)
           : analysis::event_text(buf[i], r->has_time(), line, address);
      if (age.known && json) {
        line.pop_back();  // "}\n"
        line.pop_back();
        line += fmt::format(",\"object_bytes\":{},\"age_events\":{}{}}}\n", age.bytes, age.events,
                            r->has_time() ? fmt::format(",\"age_ns\":{}", age.ns) : "");
      } else if (age.known) {
        analysis::LifetimeAnnotator::append(line, age, r->has_time());
      }
      out += line;
      ++shown;
    }
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
      output_failed();  // a full disk is an error; a reader that went away (EPIPE) is not
      return 0;
    }
    out.clear();
    if (shown >= a.limit) break;
  }
  return 0;
}

struct ExportArgs {
  bool perfetto = false;
  std::string trace;
  std::vector<std::string> results;
  std::string out;
  analysis::PerfettoOptions opt;
};

// heaplab export --perfetto: the trace (and replay results) as a file the
// Perfetto UI opens.
int run_export(const ExportArgs& a) {
  if (!a.perfetto) throw Failure{"export: say which format: --perfetto (the only one so far)"};
  std::vector<std::string> inputs = a.results;
  inputs.push_back(a.trace);
  if (std::string why = common::output_is_input(a.out, inputs); !why.empty()) throw Failure{"export: " + why};
  auto r = open_trace(a.trace);
  std::vector<analysis::PerfettoResult> results;
  for (const std::string& path : a.results) {
    const nlohmann::json j = read_result_json(path, "export");
    if (j.is_discarded()) throw Failure{"export: " + path + ": not JSON (give replay results: heaplab replay -o)"};
    // (--allocator all -o writes an array of results; an allocator it
    // skipped, or whose replay failed, has no figures: left out, and said.)
    if (j.is_array()) {
      for (size_t i = 0; i < j.size(); ++i) {
        const std::string where = path + "[" + std::to_string(i) + "]";
        if (j[i].is_object() && (j[i].contains("skipped") || (j[i].contains("exit") && !j[i].contains("replay")))) {
          const nlohmann::json& al = j[i].value("allocator", nlohmann::json::object());
          fmt::print(stderr, "heaplab: note: {}: the replay on {} {}: left out\n", where,
                     al.is_object() ? al.value("name", std::string("?")) : std::string("?"),
                     j[i].contains("skipped") ? "was skipped" : "failed");
          continue;
        }
        results.push_back({j[i], where});
      }
    } else {
      results.push_back({j, path});
    }
  }
  analysis::PerfettoSummary s;
  try {
    common::write_then_rename(a.out, [&](const std::string& tmp) {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) throw std::runtime_error(a.out + ": cannot create: " + std::strerror(errno));
      s = analysis::write_perfetto(*r, results, f, a.opt);
      f.flush();
      if (!f) throw std::runtime_error(a.out + ": cannot write: " + std::strerror(errno));
    });
  } catch (const trace::TraceError& e) {
    throw Failure{e.what()};
  } catch (const std::runtime_error& e) {
    throw Failure{std::string("export: ") + e.what()};
  }
  fmt::print(stderr, "heaplab: wrote {}: {} calls, {} counter values{} (open it at ui.perfetto.dev)\n", a.out,
             common::group_digits(s.calls), common::group_digits(s.counter_points),
             s.results ? fmt::format(", {} replay result{}", s.results, s.results == 1 ? "" : "s") : "");
  return 0;
}

}  // namespace

void add_trace_commands(CLI::App& app, Commands& commands, const CommandLine& line) {
  auto ia_ = std::make_shared<ImportArgs>();
  ImportArgs& ia = *ia_;
  auto* imp = app.add_subcommand("import", "Convert another tool's trace into a heaplab trace");
  imp->add_option("--from", ia.from,
                  "Input format: cmt-text (Compact Memory Traces text), mtrace (glibc's MALLOC_TRACE log), "
                  "heaptrack (a heaptrack 1.4 recording, .zst), logalloc (Firefox's MALLOC_LOG), "
                  "heaplab-raw (a .hlraw capture file) or "
                  "perf-pt (a perf.data of heaplab's Intel PT route)")
      ->required();
  imp->add_option("--decoder", ia.decoder, "perf-pt: direct (fastest), dlfilter or text (both run perf script)")
      ->check(CLI::IsMember({"direct", "dlfilter", "text"}))
      ->capture_default_str();
  imp->add_option("--pid", ia.pid, "perf-pt: the process to import (default: the one with the most events)");
  imp->add_option("--perf", ia.perf, "perf-pt: the perf binary (dlfilter and text decoders)")->capture_default_str();
  imp->add_option("input", ia.input, "Input file (plain, .gz, .bz2, .xz or .zst), or - for stdin")->required();
  imp->add_option("-o,--output", ia.output, "Output trace (.hlt)")->required();
  imp->add_option("--codec", ia.codec, "Chunk compression: zstd (smallest), lz4 (fastest) or none")
      ->check(CLI::IsMember({"zstd", "lz4", "none"}))
      ->capture_default_str();
  imp->add_option("--level", ia.level, "zstd level 1..22 (default 3), or lz4 acceleration (default 1)")
      ->check(CLI::Range(1, 65537));
  imp->add_option("--chunk-events", ia.chunk_events, "Events per chunk")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();

  commands.push_back({imp, [ia_, &line] { return run_import(*ia_, line.argv); }});

  auto stats_ = std::make_shared<std::pair<std::string, bool>>("", false);
  std::string& stats_path = stats_->first;
  bool& stats_json = stats_->second;
  auto* st = app.add_subcommand("stats", "Summarise a trace: operations, threads, sizes, lifetimes, peaks");
  st->add_option("trace", stats_path, "Trace file")->required();
  st->add_flag("--json", stats_json, "Print JSON instead of text");

  commands.push_back({st, [stats_] { return run_stats(stats_->first, stats_->second); }});

  auto check_ = std::make_shared<std::pair<std::string, size_t>>("", 20);
  std::string& check_path = check_->first;
  size_t& check_max = check_->second;
  auto* ck =
      app.add_subcommand("check", "Validate a trace; exit 1 if it has problems or lost events (an incomplete capture)");
  ck->add_option("trace", check_path, "Trace file")->required();
  ck->add_option("--max-problems", check_max, "How many problems to list")
      ->check(not_negative())
      ->capture_default_str();

  commands.push_back({ck, [check_] { return run_check(check_->first, check_->second); }});

  auto ca_ = std::make_shared<CatArgs>();
  CatArgs& ca = *ca_;
  auto* ct = app.add_subcommand("cat", "Print a trace's events as text");
  ct->add_option("trace", ca.path, "Trace file")->required();
  ct->add_option("--format", ca.format, "text or jsonl")
      ->check(CLI::IsMember({"text", "jsonl"}))
      ->capture_default_str();
  ct->add_option("--thread", ca.thread, "Only this thread's events");
  ct->add_option("--from", ca.from, "Start at this seq")->check(not_negative());
  ct->add_option("-n,--limit", ca.limit, "Print at most this many events")->check(not_negative());
  ct->add_flag("--meta", ca.meta, "Print the metadata JSON instead of events");
  ct->add_flag("--annotate", ca.annotate,
               "Give each free, delete and realloc its object's size and age in events (and ns): "
               "# 16 bytes, allocated 1 lines ago");
  ct->add_flag("--memory", ca.memory,
               "Print the program's own memory calls (mmap, munmap, mremap, madvise, brk), the resident pages "
               "measured and the calls the program timed (capture --latency), instead of heap events (--thread, "
               "--from, -n and --format as for events)");

  commands.push_back({ct, [ca_] { return run_cat(*ca_); }});

  auto ea_ = std::make_shared<ExportArgs>();
  ExportArgs& ea = *ea_;
  auto* ex = app.add_subcommand(
      "export",
      "Write a trace, and replay results, in another tool's format: --perfetto for the Perfetto UI (a track per "
      "thread with its calls, live bytes and objects; per replay result heap RSS, page footprint, latency)\n"
      "  heaplab export --perfetto TRACE [RESULT.json...] -o OUT.pftrace");
  ex->add_flag("--perfetto", ea.perfetto, "Perfetto's protobuf trace format (ui.perfetto.dev, trace_processor)");
  ex->add_option("trace", ea.trace, "Trace file (.hlt)")->required();
  ex->add_option("results", ea.results, "Replay results to add (heaplab replay -o; --allocator all's arrays too)");
  ex->add_option("-o,--output", ea.out, "Output file")->required();
  ex->add_option("--from", ea.opt.from, "Start at this seq")->check(not_negative());
  ex->add_option("-n,--limit", ea.opt.limit, "Export at most this many calls")->check(not_negative());

  commands.push_back({ex, [ea_] { return run_export(*ea_); }});
}

}  // namespace heaplab::cli
