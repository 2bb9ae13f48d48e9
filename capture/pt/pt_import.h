// Decoding a perf.data of heaplab's Intel PT route into a raw capture file
// (capture/shim/raw_format.h) that the normaliser turns into a trace, by one
// of three routes that give the same events:
//
//   direct    reads perf.data itself: each AUX buffer's PT bytes (in AUX
//             offset order, split where data was lost: offset gaps, AUX
//             records flagged truncated) through pt_stream; threads from the
//             AUXTRACE records (per-thread buffers) or, for per-cpu buffers,
//             from the context-switch sideband at each event's time.
//   dlfilter  `perf script --itrace=w --dlfilter libheaplab_ptw_dlfilter.so`:
//             perf's decoder, payloads written to a file by the filter.
//   text      `perf script --itrace=w -F pid,tid,synth`, parsed.
//
// In every route an event's time is its payload TSC converted to perf time
// with AUXTRACE_INFO's shift/mult/zero, its thread's events are numbered by
// the shim from 0, and a gap in the numbers is written as a `lost` record
// with the count (events cut by lost data show as gaps too).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capture/normalise/normalise.h"
#include "capture/pt/perf_data.h"
#include "capture/pt/pt_stream.h"

namespace heaplab::pt {

enum class Decoder { direct, dlfilter, text };
const char* decoder_name(Decoder d);
bool parse_decoder(const std::string& s, Decoder* d);

struct PtImportOptions {
  Decoder decoder = Decoder::direct;
  std::string perf = "perf";  // the perf binary (dlfilter and text routes)
  std::string dlfilter;       // libheaplab_ptw_dlfilter.so (dlfilter route)
  int64_t pid = -1;           // the process to keep; -1: the one with the most events
};

struct PtProcess {
  uint32_t pid = 0;
  uint64_t events = 0;
  std::string comm;
};

struct PtImportReport {
  Decoder decoder = Decoder::direct;
  uint32_t pid = 0;
  std::string comm;
  uint64_t ptw_words = 0;       // 64-bit ptwrite payloads seen
  uint64_t events = 0;          // heap events decoded (the kept process)
  uint64_t lost = 0;            // events lost: sequence gaps (the kept process)
  uint64_t cut = 0;             // events begun but cut off by lost data (all processes)
  uint64_t stray_words = 0;     // payload words outside any event
  uint64_t short_words = 0;     // 32-bit payloads (not heaplab's)
  uint64_t unattributed = 0;    // per-cpu events at a time no thread of ours ran: dropped
  StreamStats stream;           // direct route: packets, overflows, resynchronisations
  uint64_t aux_truncated = 0;   // AUX records flagged truncated or partial (data lost)
  uint64_t aux_gaps = 0;        // jumps in a buffer's AUXTRACE offsets (data lost)
  uint64_t aux_overlaps = 0;    // AUXTRACE records overlapping data already decoded (snapshot mode)
  uint64_t duplicates = 0;      // events decoded twice (overlapping data): kept once
  uint64_t unparsed_lines = 0;  // text route: lines of perf script's output that were no ptwrite sample
  uint64_t misattributed = 0;   // per-cpu: events given to a thread whose numbering they do not fit: dropped
  uint64_t pt_bytes = 0;
  uint64_t threads = 0;
  bool per_cpu = false;
  bool pipe_mode = false;
  uint64_t file_truncated_at = 0;
  uint64_t sideband_lost = 0;              // perf's LOST records: sideband lost (thread names, context switches)
  uint64_t auxtrace_errors = 0;            // perf's AUXTRACE_ERROR records
  std::vector<PtProcess> other_processes;  // not kept: their pids and event counts
  double decode_seconds = 0;               // perf.data read and decoded, events written to the raw capture's blocks
};

// The recording holds no heaplab event (of the process asked for).
struct PtNoEvents : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Decodes `perf_data` and writes DIR/PID.0.hlraw (+ .blocks) for the chosen
// process. Returns the raw file's path in *raw_path. Throws PerfDataError
// or std::runtime_error (one line, naming the file or the perf command).
PtImportReport decode_perf_pt(const std::string& perf_data, const std::string& dir, const PtImportOptions& opt,
                              std::string* raw_path);

// A whole import: decodes `perf_data` (in a temporary directory, removed
// afterwards) and normalises the chosen process into `output`, written
// whole, with the decoding report in its capture metadata.
struct PtFileImport {
  PtImportReport pt;
  normalise::NormaliseReport trace;
};
PtFileImport import_perf_pt_file(const std::string& perf_data, const std::string& output, const PtImportOptions& opt,
                                 normalise::NormaliseOptions nopt);

nlohmann::json report_to_json(const PtImportReport& r);

}  // namespace heaplab::pt
