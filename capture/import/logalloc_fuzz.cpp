// Fuzz target for the Firefox logalloc importer: the input is the log text, read through an in-memory InputStream in
// reads of changing sizes (so lines span the LineReader's refills), imported into a scratch trace file, which is closed
// and read back: it must hold exactly the events the report counts, in order, on thread 0. Rejecting a line with
// InputError is fine; crashes, sanitizer reports, hangs, a TraceError (the importer wrote an event the writer refuses,
// or a trace the reader refuses: writes to the scratch file do not fail) and a broken invariant (abort()) are not.
//   libFuzzer with clang, ASan/UBSan (heaplab_fuzz logalloc_fuzz)
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "capture/format/trace_reader.h"
#include "capture/format/trace_writer.h"
#include "capture/import/logalloc.h"
#include "capture/import/input_stream.h"

namespace {

using namespace heaplab;

// One scratch trace per process, rewritten for every input, removed at exit.
class Scratch {
 public:
  Scratch() {
    const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/heaplab-logalloc-fuzz-XXXXXX";
    const int fd = mkstemp(tmpl.data());
    if (fd < 0) {
      std::perror("logalloc_fuzz: mkstemp");
      std::abort();
    }
    ::close(fd);
    path_ = tmpl;
  }
  ~Scratch() { ::unlink(path_.c_str()); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const std::string& scratch_path() {
  static Scratch s;
  return s.path();
}

// The input, in reads of 7, 1, 300 and 65536 bytes in turn.
class MemoryInput final : public import::InputStream {
 public:
  MemoryInput(const uint8_t* data, size_t size) : data_(data), size_(size) { name_ = "fuzz.log"; }
  size_t read(char* buf, size_t n) override {
    static constexpr size_t kCaps[] = {7, 1, 300, 65536};
    const size_t k = std::min({n, size_ - pos_, kCaps[reads_++ % 4]});
    std::copy_n(data_ + pos_, k, buf);
    pos_ += k;
    return k;
  }
  const char* compression() const override { return "none"; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t reads_ = 0;
};

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "logalloc_fuzz: broken invariant: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  import::LogallocImportReport rep;
  {
    trace::WriterOptions opt;
    opt.codec = trace::kCodecNone;
    opt.chunk_events = 16;  // several chunks from a few lines
    trace::TraceWriter w(path, opt);
    MemoryInput in(data, size);
    try {
      rep = import::import_logalloc(in, w);
    } catch (const import::InputError&) {
      return 0;  // rejecting bad input with an error is the expected outcome
    }
    check(w.events() == rep.events, "the writer holds other events than the report counts");
    check(rep.events + rep.other_process_lines + rep.skipped_calls + rep.unknown_frees <= rep.lines,
          "more events than lines");
    check(rep.threads <= rep.events, "more threads than events");
    w.close();
  }
  auto r = trace::TraceReader::open(path);
  check(r->complete(), "the closed trace reads as cut short");
  check(r->event_count() == rep.events, "the trace's event count differs from the report's");
  std::vector<trace::Event> buf(64);
  trace::MergedCursor cur(*r);
  uint64_t seq = 0;
  while (const size_t n = cur.next(buf.data(), buf.size())) {
    for (size_t i = 0; i < n; ++i) {
      check(buf[i].seq == seq++, "events out of order");
      check(buf[i].thread < rep.threads, "an event on a thread the report does not count");
    }
  }
  check(seq == rep.events, "the trace decodes to another number of events");
  return 0;
}
