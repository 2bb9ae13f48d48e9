// Recording with Intel PT (`heaplab capture --method pt`): what the machine
// must have, and the `perf record` command line. The launcher
// (capture/launch) runs it and decodes the result with pt_import.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heaplab::pt {

struct PtRecordOptions {
  std::string buffers = "per-cpu";  // per-cpu (all threads, context-switch sideband) or per-thread
  uint64_t aux_kib = 0;             // AUX buffer per CPU/thread (0: perf's default); rounded up to pages, a power of 2
  std::string snapshot;             // "" off; "on" or a size (perf -S): keep only the newest trace, on signal/control
  std::string control;              // perf --control (fifo:CTL[,ACK] or fd:...), passed as is
  int psb_period = -1;              // intel_pt psb_period (-1: perf's default)
  std::string perf = "perf";        // the perf binary
};

// "" if this machine can record ptwrite with perf; else one line naming
// what is missing. The intel_pt PMU's sysfs directory is
// /sys/bus/event_source/devices/intel_pt, or $HEAPLAB_PT_SYSFS (tests).
std::string pt_missing(const std::string& perf);

// Checks the options; "" or one line naming the bad one.
std::string check_record_options(const PtRecordOptions& o);

// perf record -o OUTPUT -e intel_pt/ptw=1,branch=0,fup_on_ptw=0,mtc=0/u ...
// -- /bin/sh -c 'export LD_PRELOAD="$0" HEAPLAB_CAPTURE_ROOT=$$; exec "$@"'
// PRELOAD PROGRAM ARGS: the shim is preloaded into the program only (not
// into perf), and the program keeps the shell's pid, which the shim needs
// to know it is the process to capture.
std::vector<std::string> perf_record_argv(const PtRecordOptions& o, const std::string& output,
                                          const std::string& preload, const std::vector<std::string>& program);

}  // namespace heaplab::pt
