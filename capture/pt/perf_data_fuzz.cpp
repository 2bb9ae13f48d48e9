// Fuzz target for the perf.data reader (PerfDataFile): the input is the
// file, pipe mode or file mode, written to a scratch file (the reader maps a
// path) and read; then everything the reader exposes is walked: attrs and
// their ids, AUXTRACE_INFO's conversion, every byte of every AUXTRACE chunk
// (a chunk reaching past the mapping faults), the sideband. Rejecting bad
// input with PerfDataError is fine; crashes, sanitizer reports, hangs and a
// broken invariant of PerfData (checked below, abort()) are not.
//   libFuzzer with clang, ASan/UBSan (heaplab_fuzz perf_data_fuzz)
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "capture/pt/perf_data.h"

namespace {

// One scratch file per process, rewritten for every input, removed at exit.
class Scratch {
 public:
  Scratch() {
    const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/heaplab-perf-data-fuzz-XXXXXX";
    fd_ = mkstemp(tmpl.data());
    if (fd_ < 0) {
      std::perror("perf_data_fuzz: mkstemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~Scratch() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const std::string& path() const { return path_; }
  void write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) fatal("ftruncate");
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, off_t(done));
      if (n <= 0) fatal("pwrite");
      done += size_t(n);
    }
  }

 private:
  [[noreturn]] static void fatal(const char* what) {
    std::perror((std::string("perf_data_fuzz: ") + what).c_str());
    std::abort();
  }
  int fd_ = -1;
  std::string path_;
};

Scratch& scratch() {
  static Scratch s;
  return s;
}

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "perf_data_fuzz: broken invariant: %s\n", what);
  std::abort();
}

volatile uint64_t g_sink;

void walk(const heaplab::pt::PerfDataFile& f) {
  using namespace heaplab::pt;
  const PerfData& d = f.data();
  uint64_t h = d.records + d.lost_records + d.auxtrace_errors + d.pipe_mode;
  check(f.truncated_at() <= d.file_size, "truncated_at past the end of the file");
  for (const PerfAttr& a : d.attrs) {
    h += a.attr.type + a.attr.size + a.attr.config + a.attr.sample_type + a.attr.sample_id_all;
    for (uint64_t id : a.ids) h += id;
  }
  check(d.chunks.empty() || d.have_info, "AUXTRACE chunks without AUXTRACE_INFO");
  if (d.have_info) {
    check(d.auxtrace_type == kAuxtraceIntelPt, "AUXTRACE_INFO not of Intel PT");
    check(d.priv.size() >= kPrivCount, "AUXTRACE_INFO with too few private words");
    check(d.time.shift <= 63, "time_shift out of range");
  }
  for (uint64_t p : d.priv) h += p;
  // Chunks: in file order, each payload after the one before, all inside
  // the file; every byte read.
  uint64_t total = 0;
  const uint8_t* first = nullptr;
  const uint8_t* prev_end = nullptr;
  for (const AuxChunk& c : d.chunks) {
    check(c.size <= d.file_size, "chunk larger than the file");
    check(c.data != nullptr, "chunk without data");
    if (!first) first = c.data;
    check(prev_end == nullptr || c.data >= prev_end, "chunks overlap or out of file order");
    check(uint64_t(c.data - first) + c.size <= d.file_size, "chunks span more than the file");
    prev_end = c.data + c.size;
    for (uint64_t i = 0; i < c.size; ++i) h += c.data[i];
    h += c.idx + c.tid + uint64_t(int64_t(c.cpu)) + c.reference + d.time.to_perf(c.offset);
    total += c.size;
  }
  check(total == d.pt_bytes, "pt_bytes is not the sum of the chunks' sizes");
  for (const CommRecord& c : d.comms) {
    check(c.name.find('\0') == std::string::npos, "COMM name with a NUL");
    h += c.pid + c.tid + c.name.size() + c.exec + d.time.to_perf(c.time);
  }
  for (const TaskRecord& t : d.tasks) h += t.fork + t.pid + t.ppid + t.tid + t.ptid + t.time;
  for (const SwitchRecord& s : d.switches) {
    check(s.cpu != ~0u && s.tid != ~0u && s.time != ~uint64_t{0}, "switch record without its sample_id");
    h += s.cpu + s.pid + s.tid + s.out + d.time.to_perf(s.time);
  }
  for (const AuxRecord& a : d.aux) {
    check((a.flags & (PERF_AUX_FLAG_TRUNCATED | PERF_AUX_FLAG_PARTIAL)) != 0, "AUX record kept without a flag");
    h += a.aux_offset + a.aux_size + a.id.pid + a.id.tid + a.id.time + a.id.cpu;
  }
  g_sink = h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Scratch& s = scratch();
  s.write(data, size);
  try {
    heaplab::pt::PerfDataFile f(s.path());
    walk(f);
  } catch (const heaplab::pt::PerfDataError&) {
    // Rejecting bad input with an error is the expected outcome.
  }
  return 0;
}
