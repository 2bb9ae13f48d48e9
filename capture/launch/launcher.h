// `heaplab capture`: checks everything that can fail before the program
// starts, runs it under the shim (LD_PRELOAD=shim[:allocator]), waits, and
// normalises every raw file into a trace.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocators/linked.h"
#include "capture/normalise/normalise.h"
#include "capture/pt/pt_record.h"

namespace heaplab::launch {

// One line, for bad options, a missing program or library, an unwritable output.
struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CaptureOptions {
  std::vector<std::string> argv;  // program and arguments
  std::string output;             // trace of the program (its first image)
  std::string allocator;          // "", glibc, jemalloc, mimalloc, tcmalloc or a .so path
  // Set by validate(): the allocator the program brings (linked against it,
  // or its own malloc), and whether --allocator glibc preloads heaplab's
  // forwarder to glibc's malloc over it (libheaplab_glibc.so).
  std::optional<allocators::ProgramAllocator> program_allocator;
  bool glibc_forwarder = false;
  bool follow_fork = false;      // fork children get traces of their own
  bool follow_exec = false;      // programs exec'd by the program (or its children) too
                                 // (either: heaplab waits for all descendants to exit)
  std::string raw_dir;           // where raw files go; empty: OUTPUT.raw.PID next to the output
  bool keep_raw = false;         // keep raw files after normalising
  bool live = true;              // software method: normalise while the program runs (else after it)
  bool raw_dir_created = false;  // set by validate(): heaplab made raw_dir (and may remove it)
  std::string clock = "auto";    // auto (TSC if invariant), tsc, monotonic
  uint32_t latency = 0;          // time one call in N inside the allocator (0: none)
  std::string shim;              // path of libheaplab_capture.so; empty: next to heaplab
  normalise::NormaliseOptions normalise;
  // How events leave the program: "software" (the shim's per-thread files)
  // or "pt" (ptwrite, recorded by `perf record`, decoded afterwards).
  std::string method = "software";
  pt::PtRecordOptions pt;
  std::string pt_decoder = "direct";   // direct, dlfilter or text
  std::string pt_fallback = "refuse";  // no PT/ptwrite here: refuse, or record with the software method
};

struct TraceResult {
  std::string path;
  uint32_t pid = 0;
  uint32_t exec_generation = 0;
  std::vector<std::string> command_line;
  std::string exe;  // the image's executable (/proc/self/exe when capture started)
  normalise::NormaliseReport report;
};

// A process image the capture did not follow (the shim's DIR/unfollowed).
struct UnfollowedImage {
  std::string kind;  // "exec": an image exec'd by a process not followed into it; "fork": a child not followed
  uint32_t pid = 0, ppid = 0;
  std::string exe, command_line;  // "" past the first MiB of notes
};

struct CaptureResult {
  int exit_code = 0;                 // the program's exit code, or 128 + signal
  int signal = 0;                    // the signal that killed it, 0 if it exited
  double wall_seconds = 0;           // the program's run, start to exit
  uint64_t anon_rss_peak_kib = 0;    // the program's peak anonymous RSS (sampled every 2 ms; 0 if never read)
  bool descendants_running = false;  // followed children still ran when the wait was cut short
  double normalise_seconds = 0;
  std::string raw_dir;
  bool raw_kept = false;
  std::vector<TraceResult> traces;          // the program's own first
  uint32_t pid = 0;                         // the program's process (software method)
  std::vector<UnfollowedImage> unfollowed;  // in the order they started
  // Images not followed whose note could not be written (a full disk):
  // counted by the shim in the spare memfd instead, by kind.
  uint32_t unnoted_execs = 0, unnoted_forks = 0;
  std::vector<std::string> failed;  // raw files that could not be normalised: "PATH: why"
  std::vector<std::string> notes;   // e.g. "--method pt: ...; recorded with --method software instead"
  std::string method = "software";  // the method used
  std::string perf_data;            // --method pt: the recording (kept with --keep-raw)
};

// Checks the program, allocator, shim and output; throws LaunchError naming
// what is wrong before anything runs.
void validate(CaptureOptions& opt);

// validate() + run + normalise. Progress and the summary are not printed here.
CaptureResult run_capture(CaptureOptions opt);

// The summary lines `heaplab capture` prints.
std::string summary(const CaptureResult& r, const CaptureOptions& opt);

}  // namespace heaplab::launch
