#include "capture/pt/pt_record.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "common/process.h"

namespace heaplab::pt {

namespace {

std::string sysfs_dir() {
  const char* env = std::getenv("HEAPLAB_PT_SYSFS");
  return env && *env ? env : "/sys/bus/event_source/devices/intel_pt";
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// Whether `perf version` runs.
bool perf_runs(const std::string& perf) {
  process::Spec spec;
  spec.argv = {perf, "version"};
  spec.search_path = true;
  spec.out = process::Stdio::null;
  spec.err = process::Stdio::null;
  try {
    return process::succeeded(process::run(spec).status);
  } catch (const process::SpawnError&) {
    return false;
  }
}

// Sizes as perf takes them: digits with an optional K, M or G.
bool valid_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0) return false;
  return i == s.size() || (i + 1 == s.size() && std::string("KMGkmg").find(s[i]) != std::string::npos);
}

}  // namespace

std::string pt_missing(const std::string& perf) {
  const std::string dir = sysfs_dir();
  if (access(dir.c_str(), F_OK) != 0)
    return "this machine has no Intel PT (no " + dir +
           ": not an Intel CPU with Processor Trace, or a virtual machine that hides it)";
  if (read_line(dir + "/caps/ptwrite") != "1")
    return "this CPU's Intel PT has no ptwrite (" + dir +
           "/caps/ptwrite is not 1; ptwrite needs Gemini Lake, Tremont, Alder Lake, Sapphire Rapids or later)";
  if (!perf_runs(perf)) return "cannot run '" + perf + " version' (perf records the trace: apt-get install linux-perf)";
  return "";
}

std::string check_record_options(const PtRecordOptions& o) {
  if (o.buffers != "per-cpu" && o.buffers != "per-thread")
    return "--pt-buffers: per-cpu or per-thread, not '" + o.buffers + "'";
  if (!o.snapshot.empty() && o.snapshot != "on" && !valid_size(o.snapshot))
    return "--pt-snapshot: 'on' or a size such as 64M, not '" + o.snapshot + "'";
  if (o.psb_period > 15)
    return "--pt-psb-period: 0 to 15 (2^(N+11) bytes between PSBs), not " + std::to_string(o.psb_period);
  if (!o.control.empty() && o.control.rfind("fifo:", 0) != 0 && o.control.rfind("fd:", 0) != 0)
    return "--pt-control: fifo:CTL[,ACK] or fd:CTL[,ACK] (as perf record --control), not '" + o.control + "'";
  return "";
}

std::vector<std::string> perf_record_argv(const PtRecordOptions& o, const std::string& output,
                                          const std::string& preload, const std::vector<std::string>& program) {
  // ptw on, branch tracing off (no TNT/TIP: only PTW, PSB+ and OVF
  // packets), no FUP after each PTW, no MTC (the events carry their TSC),
  // user space only.
  std::string event = "intel_pt/ptw=1,branch=0,fup_on_ptw=0,mtc=0";
  if (o.psb_period >= 0) event += ",psb_period=" + std::to_string(o.psb_period);
  event += "/u";
  std::vector<std::string> a = {o.perf, "record", "-o", output, "-e", event};
  if (o.buffers == "per-thread") a.push_back("--per-thread");
  if (o.aux_kib) {
    uint64_t pages = (o.aux_kib + 3) / 4, p2 = 1;
    while (p2 < pages) p2 <<= 1;
    a.push_back("-m," + std::to_string(p2));
  }
  if (o.snapshot == "on")
    a.push_back("--snapshot");
  else if (!o.snapshot.empty())
    a.push_back("--snapshot=" + o.snapshot);
  if (!o.control.empty()) a.push_back("--control=" + o.control);
  a.insert(a.end(), {"--", "/bin/sh", "-c", "export LD_PRELOAD=\"$0\" HEAPLAB_CAPTURE_ROOT=$$; exec \"$@\"", preload});
  a.insert(a.end(), program.begin(), program.end());
  return a;
}

}  // namespace heaplab::pt
