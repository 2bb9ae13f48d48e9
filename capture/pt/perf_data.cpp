#include "capture/pt/perf_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace heaplab::pt {

namespace {

constexpr char kMagic[8] = {'P', 'E', 'R', 'F', 'I', 'L', 'E', '2'};

struct FileSection {
  uint64_t offset, size;
};
struct FileHeader {
  char magic[8];
  uint64_t size;
  uint64_t attr_size;
  FileSection attrs, data, event_types;
  uint64_t features[4];
};
static_assert(sizeof(FileHeader) == 104);

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The attr as stored (its own size field says how much), zero-extended.
perf_event_attr load_attr(const uint8_t* p, uint64_t avail) {
  perf_event_attr a{};
  uint32_t size = load<uint32_t>(p + 4);
  if (size == 0) size = PERF_ATTR_SIZE_VER0;
  std::memcpy(&a, p, std::min(std::min<uint64_t>(size, avail), uint64_t(sizeof a)));
  return a;
}

}  // namespace

PerfDataFile::PerfDataFile(const std::string& path) {
  d_.path = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw PerfDataError(path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw PerfDataError(path + ": " + std::strerror(e));
  }
  size_ = uint64_t(st.st_size);
  d_.file_size = size_;
  if (size_ > 0) {
    // Populated at once: one fault per page costs microseconds on some VMs.
    void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw PerfDataError(path + ": cannot map: " + std::strerror(e));
    }
    base_ = static_cast<const uint8_t*>(p);
    madvise(p, size_, MADV_SEQUENTIAL);
  }
  ::close(fd);
  try {
    parse();
  } catch (...) {
    if (base_) munmap(const_cast<uint8_t*>(base_), size_);
    throw;
  }
}

PerfDataFile::~PerfDataFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

void PerfDataFile::fail(uint64_t at, const std::string& what) const {
  throw PerfDataError(d_.path + ": at byte " + std::to_string(at) + ": " + what);
}

void PerfDataFile::parse() {
  if (size_ < 16 || std::memcmp(base_, kMagic, 8) != 0)
    throw PerfDataError(d_.path + ": not a perf.data file (no PERFILE2 magic)");
  const uint64_t header_size = load<uint64_t>(base_ + 8);
  uint64_t pos = 0, end = 0;
  if (header_size == 16) {  // pipe mode: records follow, to the end
    d_.pipe_mode = true;
    pos = 16;
    end = size_;
  } else if (header_size == sizeof(FileHeader)) {
    if (size_ < sizeof(FileHeader)) fail(0, "file header cut off");
    const FileHeader h = load<FileHeader>(base_);
    if (h.attrs.offset > size_ || h.attrs.size > size_ - h.attrs.offset) fail(24, "attrs section past the end");
    if (h.attr_size < PERF_ATTR_SIZE_VER0 + sizeof(FileSection) || (h.attrs.size && h.attr_size > h.attrs.size))
      fail(16, "attr size " + std::to_string(h.attr_size));
    const uint64_t attrs_end = h.attrs.offset + h.attrs.size;
    for (uint64_t at = h.attrs.offset; at <= attrs_end - std::min(attrs_end, h.attr_size) && h.attrs.size;
         at += h.attr_size) {
      PerfAttr a;
      a.attr = load_attr(base_ + at, h.attr_size - sizeof(FileSection));
      const FileSection ids = load<FileSection>(base_ + at + h.attr_size - sizeof(FileSection));
      if (ids.offset > size_ || ids.size > size_ - ids.offset) fail(at, "attr ids past the end");
      for (uint64_t k = 0; k + 8 <= ids.size; k += 8) a.ids.push_back(load<uint64_t>(base_ + ids.offset + k));
      d_.attrs.push_back(std::move(a));
    }
    pos = h.data.offset;
    if (pos > size_) fail(40, "data section past the end");
    // A recording still running (or killed) has data.size 0 or short: read to the end.
    end = h.data.size && h.data.size <= size_ - pos ? pos + h.data.size : size_;
  } else {
    fail(8, "unknown header size " + std::to_string(header_size));
  }
  while (pos < end) {
    if (end - pos < sizeof(perf_event_header)) {
      truncated_at_ = pos;
      break;
    }
    const perf_event_header h = load<perf_event_header>(base_ + pos);
    if (h.size < sizeof(perf_event_header)) fail(pos, "record of size " + std::to_string(h.size));
    if (h.size > end - pos) {
      truncated_at_ = pos;
      break;
    }
    uint64_t payload = 0;
    record(pos, h, &payload);
    ++d_.records;
    pos += h.size;
    if (payload > end - pos) {  // an AUXTRACE payload cut off: keep what is there
      d_.chunks.back().size = end - pos;
      d_.pt_bytes -= payload - (end - pos);
      truncated_at_ = pos;
      pos = end;
      break;
    }
    pos += payload;
  }
  if (!d_.have_info && !d_.chunks.empty()) fail(0, "AUXTRACE data without an AUXTRACE_INFO record");
}

SampleId PerfDataFile::sample_id(const uint8_t* body, uint64_t body_size) const {
  SampleId s;
  if (d_.attrs.empty()) return s;
  const perf_event_attr* a = &d_.attrs[0].attr;
  if (!a->sample_id_all) return s;
  if ((a->sample_type & PERF_SAMPLE_IDENTIFIER) && body_size >= 8) {
    const uint64_t id = load<uint64_t>(body + body_size - 8);
    for (const PerfAttr& pa : d_.attrs)
      for (uint64_t x : pa.ids)
        if (x == id) a = &pa.attr;
  }
  const uint64_t t = a->sample_type;
  uint64_t n = 0;
  for (uint64_t bit : {PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_ID, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU,
                       PERF_SAMPLE_IDENTIFIER})
    if (t & bit) n += 8;
  if (n > body_size) return s;
  const uint8_t* p = body + body_size - n;
  if (t & PERF_SAMPLE_TID) {
    s.pid = load<uint32_t>(p);
    s.tid = load<uint32_t>(p + 4);
    p += 8;
  }
  if (t & PERF_SAMPLE_TIME) {
    s.time = load<uint64_t>(p);
    p += 8;
  }
  if (t & PERF_SAMPLE_ID) p += 8;
  if (t & PERF_SAMPLE_STREAM_ID) p += 8;
  if (t & PERF_SAMPLE_CPU) s.cpu = load<uint32_t>(p);
  return s;
}

void PerfDataFile::record(uint64_t at, const perf_event_header& h, uint64_t* payload_size) {
  const uint8_t* body = base_ + at + sizeof h;
  const uint64_t n = h.size - sizeof h;
  const auto need = [&](uint64_t bytes, const char* what) {
    if (n < bytes) fail(at, std::string(what) + " record too short (" + std::to_string(n) + " bytes)");
  };
  switch (h.type) {
    case kRecordHeaderAttr: {
      need(PERF_ATTR_SIZE_VER0, "HEADER_ATTR");
      PerfAttr a;
      a.attr = load_attr(body, n);
      uint32_t asize = a.attr.size ? a.attr.size : PERF_ATTR_SIZE_VER0;
      if (asize > n) fail(at, "HEADER_ATTR attr size past the record");
      for (uint64_t k = asize; k + 8 <= n; k += 8) a.ids.push_back(load<uint64_t>(body + k));
      d_.attrs.push_back(std::move(a));
      return;
    }
    case kRecordAuxtraceInfo: {
      need(8, "AUXTRACE_INFO");
      d_.auxtrace_type = load<uint32_t>(body);
      if (d_.auxtrace_type != kAuxtraceIntelPt)
        fail(at, "AUXTRACE_INFO of type " + std::to_string(d_.auxtrace_type) + ", not Intel PT (1)");
      d_.priv.clear();
      for (uint64_t k = 8; k + 8 <= n; k += 8) d_.priv.push_back(load<uint64_t>(body + k));
      if (d_.priv.size() < kPrivCount)
        fail(at, "AUXTRACE_INFO with " + std::to_string(d_.priv.size()) + " private words (Intel PT has at least " +
                     std::to_string(kPrivCount) + ")");
      d_.have_info = true;
      if (d_.priv[kPrivTimeShift] > 63)
        fail(at, "AUXTRACE_INFO time_shift " + std::to_string(d_.priv[kPrivTimeShift]) + " out of range (0..63)");
      d_.time.shift = uint16_t(d_.priv[kPrivTimeShift]);
      d_.time.mult = uint32_t(d_.priv[kPrivTimeMult]);
      d_.time.zero = d_.priv[kPrivTimeZero];
      d_.time.enabled = d_.priv[kPrivCapUserTimeZero] != 0;
      d_.per_cpu = d_.priv[kPrivPerCpuMmaps] != 0;
      return;
    }
    case kRecordAuxtrace: {
      need(40, "AUXTRACE");
      AuxChunk c;
      c.size = load<uint64_t>(body);
      c.offset = load<uint64_t>(body + 8);
      c.reference = load<uint64_t>(body + 16);
      c.idx = load<uint32_t>(body + 24);
      c.tid = load<uint32_t>(body + 28);
      c.cpu = load<int32_t>(body + 32);
      c.data = base_ + at + h.size;
      *payload_size = c.size;
      d_.pt_bytes += c.size;
      d_.chunks.push_back(c);
      return;
    }
    case kRecordAuxtraceError:
      ++d_.auxtrace_errors;
      return;
    case kRecordCompressed:
      fail(at,
           "compressed records (perf record -z): not supported; record without -z, or "
           "`perf inject -i IN -o OUT` to decompress");
    case PERF_RECORD_COMM: {
      need(9, "COMM");
      CommRecord c;
      c.pid = load<uint32_t>(body);
      c.tid = load<uint32_t>(body + 4);
      const char* s = reinterpret_cast<const char*>(body + 8);
      c.name.assign(s, strnlen(s, n - 8));
      c.exec = h.misc & PERF_RECORD_MISC_COMM_EXEC;
      c.time = sample_id(body, n).time;
      d_.comms.push_back(std::move(c));
      return;
    }
    case PERF_RECORD_FORK:
    case PERF_RECORD_EXIT: {
      need(24, "FORK/EXIT");
      TaskRecord t;
      t.fork = h.type == PERF_RECORD_FORK;
      t.pid = load<uint32_t>(body);
      t.ppid = load<uint32_t>(body + 4);
      t.tid = load<uint32_t>(body + 8);
      t.ptid = load<uint32_t>(body + 12);
      t.time = load<uint64_t>(body + 16);
      d_.tasks.push_back(t);
      return;
    }
    case PERF_RECORD_SWITCH_CPU_WIDE:
    case PERF_RECORD_SWITCH:
    case PERF_RECORD_ITRACE_START: {
      const SampleId s = sample_id(body, n);
      if (s.time == ~uint64_t{0} || s.cpu == ~0u || s.tid == ~0u) return;  // no sample_id: no use
      SwitchRecord r;
      r.cpu = s.cpu;
      r.time = s.time;
      r.pid = s.pid;
      r.tid = s.tid;
      r.out = h.type != PERF_RECORD_ITRACE_START && (h.misc & PERF_RECORD_MISC_SWITCH_OUT);
      d_.switches.push_back(r);
      return;
    }
    case PERF_RECORD_AUX: {
      need(24, "AUX");
      AuxRecord r;
      r.aux_offset = load<uint64_t>(body);
      r.aux_size = load<uint64_t>(body + 8);
      r.flags = load<uint64_t>(body + 16);
      if (r.flags & (PERF_AUX_FLAG_TRUNCATED | PERF_AUX_FLAG_PARTIAL)) {
        r.id = sample_id(body, n);
        d_.aux.push_back(r);
      }
      return;
    }
    case PERF_RECORD_LOST:
      need(16, "LOST");
      d_.lost_records += load<uint64_t>(body + 8);
      return;
    default:
      return;
  }
}

}  // namespace heaplab::pt
