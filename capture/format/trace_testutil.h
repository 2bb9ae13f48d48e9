// Synthetic traces for tests and benchmarks: a heap-like event mix over many
// threads, with cross-thread frees, every operation kind and extreme values.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "capture/format/event.h"

namespace heaplab::trace::testutil {

struct GenOptions {
  uint32_t threads = 4;
  bool all_ops = true;  // every op kind, failures, NULL frees, huge values
  bool timestamps = true;
  double cross_thread = 0.2;  // fraction of frees done by another thread
  uint64_t max_live = 4096;   // bound on live objects
};

// Events as the writer will number them: seq = index, dense ids in order of
// creation. Every consumed object is live; a sized or aligned delete names
// the size and alignment its object was made with.
inline std::vector<Event> generate(uint64_t seed, size_t n, const GenOptions& o = {}) {
  std::mt19937_64 rng(seed);
  std::vector<Event> out;
  out.reserve(n);
  std::vector<uint64_t> live;                          // ids
  std::vector<std::pair<uint64_t, uint64_t>> made(1);  // by id: requested bytes, alignment (0: none)
  std::vector<uint8_t> started(o.threads, 0);
  uint64_t next_id = 1;
  uint64_t now = 1000;
  auto pick_size = [&]() -> uint64_t {
    const unsigned r = static_cast<unsigned>(rng() % 100);
    if (o.all_ops && r == 0) return rng() >> (rng() % 64);  // anything up to 2^64-1
    if (o.all_ops && r == 1) return (uint64_t{1} << 63) + (rng() & 0xffff);
    if (r < 80) return 8 + (rng() % 256);
    if (r < 98) return 256 + (rng() % 8192);
    return 8192 + (rng() % (1u << 22));
  };
  const Op producers[] = {Op::malloc,
                          Op::calloc,
                          Op::realloc,
                          Op::reallocarray,
                          Op::memalign,
                          Op::posix_memalign,
                          Op::aligned_alloc,
                          Op::valloc,
                          Op::pvalloc,
                          Op::op_new,
                          Op::op_new_array,
                          Op::op_new_nothrow,
                          Op::op_new_array_nothrow,
                          Op::op_new_aligned,
                          Op::op_new_array_aligned,
                          Op::op_new_aligned_nothrow,
                          Op::op_new_array_aligned_nothrow};
  const Op consumers[] = {Op::free,
                          Op::op_delete,
                          Op::op_delete_array,
                          Op::op_delete_sized,
                          Op::op_delete_array_sized,
                          Op::op_delete_aligned,
                          Op::op_delete_array_aligned,
                          Op::op_delete_sized_aligned,
                          Op::op_delete_array_sized_aligned,
                          Op::op_delete_nothrow,
                          Op::op_delete_array_nothrow,
                          Op::op_delete_aligned_nothrow,
                          Op::op_delete_array_aligned_nothrow};
  std::vector<uint32_t> owner;  // owner[id] = allocating thread
  owner.push_back(0);
  if (o.all_ops) {
    // Every thread starts first, so that cross-thread frees never precede
    // their thread's thread_start.
    for (uint32_t t = 0; t < o.threads && out.size() < n; ++t) {
      Event e{};
      e.seq = out.size();
      e.thread = t;
      e.op = Op::thread_start;
      e.time = o.timestamps ? now : 0;
      started[t] = 1;
      out.push_back(e);
    }
  }
  while (out.size() < n) {
    Event e{};
    e.seq = out.size();
    e.thread = static_cast<uint32_t>(rng() % o.threads);
    now += rng() % 200;
    if (o.all_ops && (rng() % 1000) == 0) now -= std::min<uint64_t>(now, rng() % 50);  // clock skew
    e.time = o.timestamps ? now : 0;
    if (o.all_ops && !started[e.thread]) {
      started[e.thread] = 1;
      e.op = Op::thread_start;
      out.push_back(e);
      continue;
    }
    const bool do_free = !live.empty() && (live.size() >= o.max_live || rng() % 2 == 0);
    if (do_free) {
      size_t k = rng() % live.size();
      if (rng() % 4 != 0) k = live.size() - 1 - (k % std::min<size_t>(live.size(), 8));
      e.old = live[k];
      live[k] = live.back();
      live.pop_back();
      if (double(rng() >> 11) < o.cross_thread * double(uint64_t{1} << 53)) {
        e.thread = static_cast<uint32_t>((owner[e.old] + 1) % o.threads);
      } else {
        e.thread = owner[e.old];
      }
      e.op = o.all_ops ? consumers[rng() % std::size(consumers)] : Op::free;
      // (The random draws stay, so that the rest of the stream is as before.)
      if (op_has(e.op, kSize)) {
        e.size = pick_size();
        e.size = made[e.old].first;
      }
      if (op_has(e.op, kAlign)) {
        e.align = uint64_t{1} << (rng() % 64);
        if (made[e.old].second) e.align = made[e.old].second;
      }
      out.push_back(e);
      continue;
    }
    if (o.all_ops && rng() % 200 == 0) {
      e.op = rng() % 2 ? Op::free : Op::op_delete;  // free(NULL)
      out.push_back(e);
      continue;
    }
    if (o.all_ops && rng() % 500 == 0) {
      e.op = Op::lost;
      e.count = rng() % 100000;
      out.push_back(e);
      continue;
    }
    e.op = o.all_ops ? producers[rng() % std::size(producers)] : Op::malloc;
    e.size = pick_size();
    if (op_has(e.op, kCount)) e.count = rng() % 4 == 0 ? rng() : 1 + rng() % 64;
    if (op_has(e.op, kAlign)) {
      e.align = uint64_t{1} << (rng() % 64);
      e.align = alignment_for_replay(e.op, e.align);  // (posix_memalign: at least 8)
    }
    if (op_consumes(e.op) && !live.empty() && rng() % 4 != 0) {
      size_t k = rng() % live.size();
      e.old = live[k];
      e.thread = owner[e.old];
    }
    if (o.all_ops && rng() % 100 == 0) {
      e.flags = kNullResult | kFailed;  // failed call: the old object stays
    } else if (o.all_ops && e.old && rng() % 50 == 0) {
      e.flags = kNullResult;  // realloc(p, 0) returning NULL: frees p
      e.size = 0;
    }
    if (e.old && !(e.flags & kFailed)) {
      for (size_t k = 0; k < live.size(); ++k)
        if (live[k] == e.old) {
          live[k] = live.back();
          live.pop_back();
          break;
        }
    }
    if (!(e.flags & kNullResult)) {
      e.id = next_id++;
      owner.push_back(e.thread);
      live.push_back(e.id);
      made.emplace_back(e.requested_bytes(), op_has(e.op, kAlign) ? e.align : 0);
    }
    out.push_back(e);
  }
  if (o.all_ops) {
    // End each thread that started (keeps thread_end last per thread).
    for (uint32_t t = 0; t < o.threads && !out.empty(); ++t) {
      if (!started[t]) continue;
      Event e{};
      e.seq = out.size();
      e.thread = t;
      e.op = Op::thread_end;
      e.time = o.timestamps ? now : 0;
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace heaplab::trace::testutil

#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "capture/format/bytes.h"
#include "capture/format/trace_format.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_writer.h"

namespace heaplab::trace::testutil {

// The source tree: $HEAPLAB_SOURCE_DIR (set by ctest), else the compile-time
// HEAPLAB_TEST_SOURCE_DIR of the test target, else ".".
#ifndef HEAPLAB_TEST_SOURCE_DIR
#define HEAPLAB_TEST_SOURCE_DIR "."
#endif
inline std::string source_dir() {
  const char* env = std::getenv("HEAPLAB_SOURCE_DIR");
  return env && *env ? env : HEAPLAB_TEST_SOURCE_DIR;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The CHNK blocks' payloads of a trace file's bytes, in file order (up to
// the index, which the footer follows).
inline std::vector<std::string> chunk_payloads(const std::string& file) {
  std::vector<std::string> out;
  const auto* p = reinterpret_cast<const uint8_t*>(file.data());
  for (size_t off = kFileHeaderSize; off + kBlockHeaderSize <= file.size();) {
    const uint32_t type = bytes::load_u32(p + off), size = bytes::load_u32(p + off + 4);
    if (type == kBlockIndex) break;
    if (type == kBlockChunk) out.push_back(file.substr(off + kBlockHeaderSize, size));
    off += kBlockHeaderSize + size;
  }
  return out;
}

// The events in a CHNK payload (its second u32, after the thread).
inline uint32_t chunk_events(const std::string& payload) {
  return bytes::load_u32(reinterpret_cast<const uint8_t*>(payload.data()) + 4);
}

inline void write_file(const std::string& path, std::string_view data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

// A fresh directory under /tmp, removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/heaplab_test_XXXXXX";
    const char* p = mkdtemp(tmpl);
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A 16 MiB file system (tmpfs) at `path` for the test's life; why_not says
// why there is none (mounting needs root, and a system that allows it).
struct SmallFs {
  explicit SmallFs(std::string p) : path(std::move(p)) {
    if (geteuid() != 0) {
      why_not = "mounting a tmpfs needs root";
      return;
    }
    std::filesystem::create_directory(path);
    if (::mount("tmpfs", path.c_str(), "tmpfs", 0, "size=16m") != 0) why_not = "cannot mount a tmpfs here";
  }
  ~SmallFs() {
    if (why_not.empty()) ::umount2(path.c_str(), MNT_DETACH);
  }
  SmallFs(const SmallFs&) = delete;
  SmallFs& operator=(const SmallFs&) = delete;
  std::string path, why_not;
};

// Event builders for hand-written traces.
inline Event ev(Op op, uint32_t thread = 0, uint64_t time = 0) {
  Event e;
  e.op = op;
  e.thread = thread;
  e.time = time;
  return e;
}
inline Event alloc(uint64_t size, uint32_t thread = 0, uint64_t time = 0) {
  Event e = ev(Op::malloc, thread, time);
  e.size = size;
  return e;
}
inline Event release(uint64_t old, uint32_t thread = 0, uint64_t time = 0, Op op = Op::free) {
  Event e = ev(op, thread, time);
  e.old = old;
  return e;
}

// Writes `events` (seq/id filled in by the writer) to `path`.
inline void write_trace(const std::string& path, std::vector<Event>& events, const WriterOptions& opt) {
  TraceWriter w(path, opt);
  for (Event& e : events) w.append(e);
  w.close();
}

// All events of a reader in global order.
inline std::vector<Event> read_all(const TraceReader& r) {
  std::vector<Event> out, buf(333);
  MergedCursor c(r);
  while (size_t n = c.next(buf.data(), buf.size())) out.insert(out.end(), buf.begin(), buf.begin() + n);
  return out;
}

// Recomputes every block checksum (and the header's and footer's) of a
// trace image in place, so that fuzzed bytes reach the decoders instead of
// being stopped by the checksums. Stops at the first block that does not fit.
inline void repair_checksums(std::string& img) {
  auto* d = reinterpret_cast<uint8_t*>(img.data());
  const size_t size = img.size();
  if (size < kFileHeaderSize) return;
  uint64_t h = plain_checksum(d, 24);
  std::memcpy(d + 24, &h, 8);
  size_t off = kFileHeaderSize;
  while (size - off >= kBlockHeaderSize) {
    uint32_t type, len;
    std::memcpy(&type, d + off, 4);
    std::memcpy(&len, d + off + 4, 4);
    if (size - off - kBlockHeaderSize < len) break;
    uint64_t c = block_checksum(type, d + off + kBlockHeaderSize, len);
    std::memcpy(d + off + 8, &c, 8);
    off += kBlockHeaderSize + len;
    if (size - off == kFooterSize) {
      uint64_t f = plain_checksum(d + off, 24);
      std::memcpy(d + off + 24, &f, 8);
      break;
    }
  }
}

}  // namespace heaplab::trace::testutil
