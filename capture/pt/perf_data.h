// Reading what heaplab needs from a perf.data file of an Intel PT
// recording, in file mode (`perf record -o f`) or pipe mode (`perf record
// -o -` saved to a file): the event attributes, AUXTRACE_INFO (PMU, time
// conversion, per-cpu or per-thread buffers), the AUXTRACE chunks of PT
// bytes (left in the file's mapping, not copied), AUX records flagged
// truncated or partial, and the sideband: COMM (thread names, exec), FORK
// and EXIT (which process a thread is in), SWITCH_CPU_WIDE and ITRACE_START
// (which thread ran on which CPU when, for per-cpu buffers), LOST.
//
// Record layouts: <linux/perf_event.h> for the kernel's, perf's own
// (HEADER_ATTR 64 ... FINISHED_INIT 82) as in perf 6.1's
// tools/lib/perf/include/perf/event.h. Little-endian only.
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace heaplab::pt {

// "PATH: at byte N: what"
struct PerfDataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// perf's own record types.
enum PerfUserRecord : uint32_t {
  kRecordHeaderAttr = 64,
  kRecordHeaderEventType = 65,
  kRecordHeaderTracingData = 66,
  kRecordHeaderBuildId = 67,
  kRecordFinishedRound = 68,
  kRecordIdIndex = 69,
  kRecordAuxtraceInfo = 70,
  kRecordAuxtrace = 71,
  kRecordAuxtraceError = 72,
  kRecordTimeConv = 79,
  kRecordHeaderFeature = 80,
  kRecordCompressed = 81,
  kRecordFinishedInit = 82,
};

inline constexpr uint32_t kAuxtraceIntelPt = 1;
// AUXTRACE_INFO priv[] of Intel PT (perf's intel-pt.h).
enum IntelPtPriv : unsigned {
  kPrivPmuType = 0,
  kPrivTimeShift = 1,
  kPrivTimeMult = 2,
  kPrivTimeZero = 3,
  kPrivCapUserTimeZero = 4,
  kPrivTscBit = 5,
  kPrivNoretcompBit = 6,
  kPrivHaveSchedSwitch = 7,
  kPrivSnapshotMode = 8,
  kPrivPerCpuMmaps = 9,
  kPrivCount = 10,  // the fewest perf writes
};

// TSC to perf time, as the kernel's mmap page and perf do it.
struct TimeConv {
  uint16_t shift = 0;
  uint32_t mult = 1;
  uint64_t zero = 0;
  bool enabled = false;  // cap_user_time_zero: else perf time is the TSC itself
  uint64_t to_perf(uint64_t tsc) const {
    if (!enabled) return tsc;
    const uint64_t quot = tsc >> shift;  // shift <= 63 (checked when read)
    const uint64_t rem = tsc & ((uint64_t{1} << shift) - 1);
    return zero + quot * mult + ((rem * mult) >> shift);
  }
};

struct PerfAttr {
  perf_event_attr attr{};  // zero past the file's attr size
  std::vector<uint64_t> ids;
};

// One AUXTRACE record: `size` PT bytes at `offset` of buffer `idx`'s stream.
struct AuxChunk {
  uint32_t idx = 0;
  int32_t cpu = -1;
  uint32_t tid = 0;
  uint64_t offset = 0;
  uint64_t reference = 0;
  const uint8_t* data = nullptr;  // into the file's mapping
  uint64_t size = 0;
};

// The sample_id fields of a sideband record (those the attr has; else ~0).
struct SampleId {
  uint32_t pid = ~0u, tid = ~0u;
  uint64_t time = ~uint64_t{0};
  uint32_t cpu = ~0u;
};

struct CommRecord {
  uint32_t pid = 0, tid = 0;
  std::string name;
  bool exec = false;
  uint64_t time = ~uint64_t{0};
};

struct TaskRecord {  // FORK or EXIT
  bool fork = true;
  uint32_t pid = 0, ppid = 0, tid = 0, ptid = 0;
  uint64_t time = 0;
};

// A thread starts running on a CPU (a switch-in, or ITRACE_START) or stops.
struct SwitchRecord {
  uint32_t cpu = 0;
  uint64_t time = 0;
  uint32_t pid = 0, tid = 0;  // the thread switching in or out
  bool out = false;
};

struct AuxRecord {
  uint64_t aux_offset = 0, aux_size = 0, flags = 0;
  SampleId id;
};

struct PerfData {
  std::string path;
  bool pipe_mode = false;
  uint64_t file_size = 0;
  std::vector<PerfAttr> attrs;
  bool have_info = false;
  uint32_t auxtrace_type = 0;
  std::vector<uint64_t> priv;
  TimeConv time;
  bool per_cpu = false;
  std::vector<AuxChunk> chunks;  // in file order
  std::vector<CommRecord> comms;
  std::vector<TaskRecord> tasks;
  std::vector<SwitchRecord> switches;  // in file order (perf sorts by time per round)
  std::vector<AuxRecord> aux;          // only those with flags set
  uint64_t lost_records = 0;           // LOST records' counts (sideband lost: thread names may be missing)
  uint64_t auxtrace_errors = 0;
  uint64_t records = 0;
  uint64_t pt_bytes = 0;
};

// Maps and reads `path`. Throws PerfDataError naming the path and byte
// offset for anything it cannot read (bad magic, a record running past the
// end, zstd-compressed records, a non-Intel-PT AUXTRACE_INFO). A file cut
// off inside an AUXTRACE payload keeps the bytes that are there (the chunk
// is shortened; `truncated_at` says where) rather than failing.
class PerfDataFile {
 public:
  explicit PerfDataFile(const std::string& path);
  ~PerfDataFile();
  PerfDataFile(const PerfDataFile&) = delete;
  PerfDataFile& operator=(const PerfDataFile&) = delete;
  const PerfData& data() const { return d_; }
  // Non-zero if the file ends inside a record (a recording cut short).
  uint64_t truncated_at() const { return truncated_at_; }

 private:
  void parse();
  [[noreturn]] void fail(uint64_t at, const std::string& what) const;
  void record(uint64_t at, const perf_event_header& h, uint64_t* payload_size);
  SampleId sample_id(const uint8_t* body, uint64_t body_size) const;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  PerfData d_;
  uint64_t truncated_at_ = 0;
};

}  // namespace heaplab::pt
