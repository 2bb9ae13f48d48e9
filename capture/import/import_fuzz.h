// What the importers' fuzz targets share (cmt_text_fuzz, mtrace_fuzz,
// heaptrack_fuzz, logalloc_fuzz): the input, read through an in-memory
// InputStream in reads of changing sizes (so lines span the LineReader's
// refills), is imported into a scratch trace file, which is closed and read
// back: it must hold exactly the events the report counts, in order, on the
// threads the report allows. Rejecting a line with InputError is fine;
// crashes, sanitizer reports, hangs, a TraceError (the importer wrote an
// event the writer refuses, or a trace the reader refuses: writes to the
// scratch file do not fail) and a broken invariant (abort()) are not.
#pragma once

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
#include "capture/import/input_stream.h"

namespace heaplab::import::fuzz {

// One scratch trace per process, rewritten for every input, removed at exit.
class Scratch {
 public:
  explicit Scratch(const std::string& target) {
    const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/heaplab-" + target + "-XXXXXX";
    const int fd = mkstemp(tmpl.data());
    if (fd < 0) {
      std::perror((target + ": mkstemp").c_str());
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

// The input, in reads of 7, 1, 300 and 65536 bytes in turn.
class ChunkedInput final : public InputStream {
 public:
  ChunkedInput(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size) { name_ = name; }
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

// Aborts with "TARGET: broken invariant: WHAT" unless `ok`.
inline void check(bool ok, const std::string& target, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "%s: broken invariant: %s\n", target.c_str(), what);
  std::abort();
}

// One fuzz input through an importer: `import(InputStream&, TraceWriter&)`
// returns its report (with `events`); `invariants(report, check)` checks
// what the report must satisfy, calling check(ok, what); `threads(report)`
// is how many threads its events may use (1: all on thread 0).
template <class Import, class Invariants, class Threads>
int import_one(const std::string& target, const std::string& name, const uint8_t* data, size_t size, Import import,
               Invariants invariants, Threads threads) {
  static const Scratch scratch(target);
  const auto check_ = [&](bool ok, const char* what) { check(ok, target, what); };
  decltype(import(std::declval<InputStream&>(), std::declval<trace::TraceWriter&>())) rep;
  {
    trace::WriterOptions opt;
    opt.codec = trace::kCodecNone;
    opt.chunk_events = 16;  // several chunks from a few lines
    trace::TraceWriter w(scratch.path(), opt);
    ChunkedInput in(data, size, name);
    try {
      rep = import(in, w);
    } catch (const InputError&) {
      return 0;  // rejecting bad input with an error is the expected outcome
    }
    check_(w.events() == rep.events, "the writer holds other events than the report counts");
    invariants(rep, check_);
    w.close();
  }
  auto r = trace::TraceReader::open(scratch.path());
  check_(r->complete(), "the closed trace reads as cut short");
  check_(r->event_count() == rep.events, "the trace's event count differs from the report's");
  std::vector<trace::Event> buf(64);
  trace::MergedCursor cur(*r);
  uint64_t seq = 0;
  const uint64_t allowed = threads(rep);
  while (const size_t n = cur.next(buf.data(), buf.size())) {
    for (size_t i = 0; i < n; ++i) {
      check_(buf[i].seq == seq++, "events out of order");
      check_(buf[i].thread < allowed, "an event on a thread the report does not allow");
    }
  }
  check_(seq == rep.events, "the trace decodes to another number of events");
  return 0;
}

}  // namespace heaplab::import::fuzz
