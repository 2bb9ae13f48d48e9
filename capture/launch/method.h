// The capture methods behind `heaplab capture`, and what they share.
//
// launcher.cpp runs one path for every method:
//   choose_method()      the method's own checks, before anything runs (pt on
//                        a machine without Intel PT: refuse, or software)
//   validate()           program, shim, allocator, output, raw directory
//   method->command()    the process to start, the shim preloaded
//   spawn, wait (signals forwarded; followed descendants waited for)
//   method->collect()    what the program left -> traces
// Internal to capture/launch.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capture/launch/launcher.h"
#include "common/process.h"

namespace heaplab::launch {

[[noreturn]] void fail(const std::string& what);  // throws LaunchError
std::string errstr(int e);

// A TSC reading and the monotonic clock at the same moment.
struct ClockPair {
  uint64_t ticks = 0, mono = 0;
};
ClockPair clock_pair();

// How the program ran.
struct RunInfo {
  pid_t pid = 0;  // the process heaplab started (the program, or perf)
  ClockPair start;
  std::chrono::steady_clock::time_point t0;
};

class CaptureMethod {
 public:
  virtual ~CaptureMethod() = default;
  virtual const char* name() const = 0;
  // What heaplab starts, as named in "cannot run 'X'" (`given`: the program as the user named it).
  virtual std::string starts(const CaptureOptions&, const std::string& given) const { return given; }
  // The process to start (argv, PATH lookup, environment); `preload` is the
  // LD_PRELOAD list with the shim first. May name its outputs in res.
  virtual void command(const CaptureOptions& opt, CaptureResult& res, const std::string& preload,
                       process::Spec& spec) const = 0;
  // The program has started (run.pid known): work to do while it runs.
  virtual void started(const CaptureOptions&, const RunInfo&) {}
  // After the program (and followed descendants) exited: its raw data into
  // res.traces, res.failed and res.notes (run_capture then removes the raw
  // files unless they are kept).
  virtual void collect(CaptureOptions& opt, CaptureResult& res, const RunInfo& run) const = 0;
};

// The method opt.method names, after its checks (LaunchError, one line).
// --method pt where this machine has no Intel PT or ptwrite: LaunchError, or
// with --pt-fallback software the software method and a note in res.
std::unique_ptr<CaptureMethod> choose_method(CaptureOptions& opt, CaptureResult& res);
std::unique_ptr<CaptureMethod> software_method();
std::unique_ptr<CaptureMethod> pt_method();

// Raw files: DIR/PID.GEN.hlraw (or, with ext "ptw", the ptwrite sink's markers).
struct RawName {
  std::string path;
  uint32_t pid = 0, gen = 0;
};
std::vector<RawName> list_raw(const std::string& dir, const char* ext = "hlraw");
// Removes this capture's raw files (and the directory if heaplab made it).
void remove_raw(const CaptureOptions& opt);
// The trace of process PID, image GEN: OUTPUT itself for the program's own,
// else OUTPUT's stem, the program's name (the file name of argv[0], if
// known), the pid and the image: app.sqlite3.1234-1.hlt.
std::string trace_name(const std::string& output, uint32_t pid, uint32_t gen, bool root,
                       const std::vector<std::string>& argv = {});
// Sets m["allocator"] (what answered malloc in the image of header `h`: the
// allocator preloaded, the forwarder counting as glibc, else the one its
// executable brings, else glibc) and m["program_allocator"] (what its
// executable brings, if anything).
void label_allocator(nlohmann::json& m, const CaptureOptions& opt, const raw::FileHeader& h);
// The shim's notes of what it did not follow (DIR/unfollowed), in order.
std::vector<UnfollowedImage> read_unfollowed(const std::string& raw_dir);
// Normalises `raw` into the trace `out` (written whole: common::write_then_rename);
// the capture's metadata (allocator; for the program's own trace its exit status) plus `meta`.
TraceResult normalise_to(normalise::RawFile& raw, const std::string& out, const CaptureOptions& opt,
                         const CaptureResult& res, bool root, const nlohmann::json& meta);
// The capture's metadata for a trace: the allocator; for the program's own
// trace its exit status, wall time and peak anonymous RSS; plus `meta`.
nlohmann::json capture_metadata(const CaptureOptions& opt, const CaptureResult& res, bool root,
                                const nlohmann::json& meta);

}  // namespace heaplab::launch
