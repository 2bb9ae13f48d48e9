#include "capture/normalise/memory_sorter.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "capture/format/bytes.h"

namespace heaplab::normalise {

using trace::MemOp;
using trace::MemoryEvent;
using namespace trace::bytes;

namespace {

constexpr size_t kItemSize = 96;  // key (3 x 8) + 8 x 8 + op and thread (2 x 4)
constexpr size_t kBatch = 256;    // items decoded at a time per run

// A batch of n items is written column by column: each of the eleven
// 64-bit fields as the differences between one item's and the one
// before's (the first item's from 0), then the ops and the threads. A run
// is sorted by its keys, and neighbouring records share a thread, a region
// and most of their fields, so the columns are mostly small numbers and
// runs of zeros: zstd keeps about a third of the bytes it kept of whole items.
constexpr size_t kFields = 11;
// (Every field of a MemoryEvent is a column, or its op or thread.)
static_assert(sizeof(MemoryEvent) == 8 * 8 + 2 * 4 && kItemSize == kFields * 8 + 2 * 4);

// Field c of an item (0 <= c < kFields), by reference.
template <class I>
auto& field(I& it, size_t c) {
  switch (c) {
    case 0:
      return it.key.major;
    case 1:
      return it.key.minor;
    case 2:
      return it.key.seq;
    case 3:
      return it.e.after;
    case 4:
      return it.e.time;
    case 5:
      return it.e.region;
    case 6:
      return it.e.offset;
    case 7:
      return it.e.length;
    case 8:
      return it.e.pages;
    case 9:
      return it.e.new_region;
    default:
      return it.e.new_length;
  }
}

void encode_batch(const MemorySorter::Item* items, size_t n, char* p) {
  for (size_t c = 0; c < kFields; ++c) {
    uint64_t prev = 0;
    for (size_t i = 0; i < n; ++i, p += 8) {
      const uint64_t v = field(items[i], c), d = v - prev;  // modulo 2^64
      prev = v;
      std::memcpy(p, &d, 8);
    }
  }
  for (size_t i = 0; i < n; ++i, p += 4) {
    const uint32_t op = uint32_t(items[i].e.op);
    std::memcpy(p, &op, 4);
  }
  for (size_t i = 0; i < n; ++i, p += 4) std::memcpy(p, &items[i].e.thread, 4);
}

void decode_batch(const char* p, size_t n, MemorySorter::Item* items) {
  for (size_t c = 0; c < kFields; ++c) {
    uint64_t prev = 0;
    for (size_t i = 0; i < n; ++i, p += 8) {
      uint64_t d;
      std::memcpy(&d, p, 8);
      prev += d;
      field(items[i], c) = prev;
    }
  }
  for (size_t i = 0; i < n; ++i, p += 4) {
    uint32_t op;
    std::memcpy(&op, p, 4);
    items[i].e.op = MemOp(op);
  }
  for (size_t i = 0; i < n; ++i, p += 4) std::memcpy(&items[i].e.thread, p, 4);
}

// The least of a few sorted sources, a record at a time: a binary heap of
// (key, source). `peek(i)` gives source i's next item or nullptr, `pop(i)`
// moves past it.
template <class Peek, class Pop>
class Merge {
 public:
  Merge(int sources, Peek peek, Pop pop) : peek_(peek), pop_(pop) {
    for (int i = 0; i < sources; ++i) push(i);
  }
  // The next item in key order (valid until the next call), or nullptr.
  const MemorySorter::Item* next() {
    if (last_ >= 0) {
      pop_(last_);
      push(last_);
      last_ = -1;
    }
    if (heap_.empty()) return nullptr;
    std::pop_heap(heap_.begin(), heap_.end(), Greater{});
    last_ = heap_.back().second;
    heap_.pop_back();
    return peek_(last_);
  }

 private:
  struct Greater {
    bool operator()(const std::pair<MemorySorter::Key, int>& a, const std::pair<MemorySorter::Key, int>& b) const {
      return b.first < a.first;
    }
  };
  void push(int i) {
    if (const MemorySorter::Item* it = peek_(i)) {
      heap_.emplace_back(it->key, i);
      std::push_heap(heap_.begin(), heap_.end(), Greater{});
    }
  }
  Peek peek_;
  Pop pop_;
  std::vector<std::pair<MemorySorter::Key, int>> heap_;
  int last_ = -1;  // the source of the item handed out last (moved past at the next call)
};

}  // namespace

// A run read back a batch at a time.
class MemorySorter::RunReader {
 public:
  RunReader(const MemorySorter& s, const Run& r) : s_(s), off_(r.offset), end_(r.offset + r.length), left_(r.count) {
    if (!ds_ || ZSTD_isError(ZSTD_initDStream(ds_.get()))) s_.fail("cannot start zstd");
    in_.resize(size_t{1} << 16);
    raw_.resize(kBatch * kItemSize);
    items_.resize(kBatch);
  }
  RunReader(const RunReader&) = delete;
  RunReader& operator=(const RunReader&) = delete;

  const Item* peek() {
    if (pos_ == len_ && !refill()) return nullptr;
    return &items_[pos_];
  }
  void pop() { ++pos_; }

 private:
  bool refill() {
    if (left_ == 0) return false;
    const size_t want = size_t(std::min<uint64_t>(left_, kBatch)) * kItemSize;
    ZSTD_outBuffer out{raw_.data(), want, 0};
    while (out.pos < out.size) {
      if (in_pos_ == in_len_ && off_ == end_) {
        // All read: what zstd still holds comes out with no more input.
        ZSTD_inBuffer none{in_.data(), 0, 0};
        const size_t before = out.pos;
        const size_t r = ZSTD_decompressStream(ds_.get(), &out, &none);
        if (ZSTD_isError(r)) s_.fail(std::string("the scratch file is damaged: ") + ZSTD_getErrorName(r));
        if (out.pos == before) s_.fail("a run ended early");
        continue;
      }
      if (in_pos_ == in_len_) {
        const ssize_t n = ::pread(s_.fd_, in_.data(), std::min<uint64_t>(in_.size(), end_ - off_), off_t(off_));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) s_.fail(std::string("cannot read the scratch file: ") + (n < 0 ? std::strerror(errno) : "short"));
        off_ += uint64_t(n);
        in_pos_ = 0;
        in_len_ = size_t(n);
      }
      ZSTD_inBuffer in{in_.data(), in_len_, in_pos_};
      const size_t r = ZSTD_decompressStream(ds_.get(), &out, &in);
      if (ZSTD_isError(r)) s_.fail(std::string("the scratch file is damaged: ") + ZSTD_getErrorName(r));
      in_pos_ = in.pos;
    }
    len_ = want / kItemSize;
    decode_batch(raw_.data(), len_, items_.data());
    left_ -= len_;
    pos_ = 0;
    return true;
  }

  const MemorySorter& s_;
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> ds_{ZSTD_createDStream(), ZSTD_freeDStream};
  uint64_t off_, end_, left_;
  std::vector<char> in_, raw_;
  size_t in_pos_ = 0, in_len_ = 0;
  std::vector<Item> items_;
  size_t pos_ = 0, len_ = 0;
};

namespace {

// The final merge's sources: 0, the records still in memory; i + 1, run i.
struct MemPeek {
  MemorySorter::Item* buf;
  size_t size;
  size_t* pos;
  std::vector<std::unique_ptr<MemorySorter::RunReader>>* readers;
  const MemorySorter::Item* operator()(int i) const {
    if (i == 0) return *pos < size ? &buf[*pos] : nullptr;
    return (*readers)[size_t(i - 1)]->peek();
  }
};
struct MemPop {
  size_t* pos;
  std::vector<std::unique_ptr<MemorySorter::RunReader>>* readers;
  void operator()(int i) const {
    if (i == 0)
      ++*pos;
    else
      (*readers)[size_t(i - 1)]->pop();
  }
};

}  // namespace

struct MemorySorter::Merger {
  Merge<MemPeek, MemPop> m;
};

MemorySorter::MemorySorter(std::string dir, size_t run) : dir_(std::move(dir)), run_(std::max<size_t>(run, 1)) {}

MemorySorter::~MemorySorter() {
  readers_.clear();
  if (fd_ >= 0) ::close(fd_);
}

void MemorySorter::fail(const std::string& what) const {
  throw std::runtime_error("the program's own memory records: scratch file in " + dir_ + ": " + what);
}

void MemorySorter::push(uint64_t major, uint64_t minor, const MemoryEvent& e) {
  if (merging_) throw std::logic_error("MemorySorter::push after next");
  buf_.push_back(Item{Key{major, minor, pushed_++}, e});
  if (buf_.size() >= run_) spill();
}

void MemorySorter::spill() {
  std::sort(buf_.begin(), buf_.end(), [](const Item& a, const Item& b) { return a.key < b.key; });
  write_run({}, &buf_, 0);
  buf_.clear();
  // kMaxRuns runs of one level make one of the next (the newest level's
  // first: only the run just written can have made a level full).
  for (unsigned level = 0;; ++level) {
    std::vector<size_t> at;
    for (size_t i = 0; i < runs_.size(); ++i)
      if (runs_[i].level == level) at.push_back(i);
    if (at.size() < kMaxRuns) break;
    std::vector<std::unique_ptr<RunReader>> rs;
    std::vector<RunReader*> from;
    for (size_t i : at) {
      rs.push_back(std::make_unique<RunReader>(*this, runs_[i]));
      from.push_back(rs.back().get());
    }
    write_run(from, nullptr, level + 1);
    rs.clear();
    // The merged runs' room goes back (the file keeps its size).
    // (Where holes cannot be punched, the file keeps all it was given, and
    // the figure counts it.)
    for (size_t i : at)
      if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(runs_[i].offset),
                      off_t(runs_[i].length)) == 0)
        held_bytes_ -= runs_[i].length;
    for (auto it = at.rbegin(); it != at.rend(); ++it) runs_.erase(runs_.begin() + std::ptrdiff_t(*it));
  }
}

// Writes a run at the end of the scratch file: `sorted` (in key order), or
// the merge of `from`.
void MemorySorter::write_run(const std::vector<RunReader*>& from, const std::vector<Item>* sorted, unsigned level) {
  if (fd_ < 0) {
    std::string path = (dir_.empty() ? std::string(".") : dir_) + "/.heaplab-memory-XXXXXX";
    fd_ = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd_ < 0) fail(std::string("cannot create: ") + std::strerror(errno));
    ::unlink(path.c_str());
  }
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  if (!cctx) fail("cannot start zstd");
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 1);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_windowLog, 16);  // (each reader of the run holds its window)
  std::vector<char> raw, out(ZSTD_CStreamOutSize());
  std::vector<Item> batch;
  batch.reserve(kBatch);
  Run run{file_end_, 0, 0, level};
  auto put_out = [&](const char* d, size_t n) {
    while (n > 0) {
      const ssize_t w = ::pwrite(fd_, d, n, off_t(file_end_));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail(std::string("cannot write: ") + std::strerror(errno));
      d += w;
      n -= size_t(w);
      file_end_ += uint64_t(w);
    }
  };
  auto flush = [&](bool last) {
    raw.resize(batch.size() * kItemSize);
    encode_batch(batch.data(), batch.size(), raw.data());
    batch.clear();
    ZSTD_inBuffer in{raw.data(), raw.size(), 0};
    for (size_t left = 1; left != 0 || in.pos < in.size;) {
      ZSTD_outBuffer o{out.data(), out.size(), 0};
      left = ZSTD_compressStream2(cctx.get(), &o, &in, last ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError(left)) fail(std::string("zstd: ") + ZSTD_getErrorName(left));
      put_out(out.data(), o.pos);
      if (!last && in.pos == in.size) break;
    }
  };
  // (Batches of kBatch from the run's start: its reader reads them so.)
  auto add = [&](const Item& it) {
    batch.push_back(it);
    ++run.count;
    if (batch.size() == kBatch) flush(false);
  };
  if (sorted) {
    for (const Item& it : *sorted) add(it);
  } else {
    Merge m(
        int(from.size()), [&](int i) { return from[size_t(i)]->peek(); }, [&](int i) { from[size_t(i)]->pop(); });
    while (const Item* it = m.next()) add(*it);
  }
  flush(true);
  run.length = file_end_ - run.offset;
  held_bytes_ += run.length;
  peak_bytes_ = std::max(peak_bytes_, held_bytes_);
  runs_.push_back(run);
  ++runs_written_;
}

void MemorySorter::start_merge() {
  merging_ = true;  // (no more pushes; should this throw, the next call starts again)
  readers_.clear();
  mem_pos_ = 0;
  std::sort(buf_.begin(), buf_.end(), [](const Item& a, const Item& b) { return a.key < b.key; });
  for (const Run& r : runs_) readers_.push_back(std::make_unique<RunReader>(*this, r));
  merge_ = std::make_unique<Merger>(
      Merger{Merge(int(readers_.size()) + 1, MemPeek{buf_.data(), buf_.size(), &mem_pos_, &readers_},
                   MemPop{&mem_pos_, &readers_})});
}

bool MemorySorter::next(MemoryEvent& e) {
  if (!merge_) start_merge();
  const Item* it = merge_->m.next();
  if (!it) return false;
  e = it->e;
  return true;
}

}  // namespace heaplab::normalise
