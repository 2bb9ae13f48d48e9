#include "capture/format/trace_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "capture/format/address_block.h"
#include "capture/format/bytes.h"
#include "capture/format/heap_top.h"
#include "capture/format/mapping_guard.h"
#include "capture/format/memory_available.h"

namespace heaplab::trace {
namespace {

using bytes::load_u16;
using bytes::load_u32;
using bytes::load_u64;

std::string fmt_bytes(uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }
std::string gib(uint64_t bytes);

}  // namespace

// ---------------------------------------------------------------- opening

TraceReader::FileStamp file_stamp_of(const struct stat& st) {
  return {uint64_t(st.st_dev), uint64_t(st.st_ino), uint64_t(st.st_size),
          uint64_t(st.st_mtim.tv_sec) * 1000000000u + uint64_t(st.st_mtim.tv_nsec)};
}

std::unique_ptr<TraceReader> TraceReader::open(const std::string& path) {
  // O_NONBLOCK: a FIFO (or a device) is refused below instead of waiting in
  // open() for a writer that may never come; a regular file reads as ever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw TraceError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw TraceError(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw TraceError(path + ": not a regular file (a trace is read from a file, not a pipe or device)");
  }
  std::unique_ptr<TraceReader> r(new TraceReader());
  r->name_ = path;
  r->stamp_ = file_stamp_of(st);
  const size_t len = static_cast<size_t>(st.st_size);
  if (len > 0) {
    void* m = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw TraceError(path + ": cannot map: " + std::strerror(e));
    }
    r->map_ = m;
    r->map_len_ = len;
    guard_mapping(m, len, path);  // (a file cut short under the mapping: one line, not "Bus error")
    r->data_ = std::string_view(static_cast<const char*>(m), len);
  }
  ::close(fd);
  r->load();
  return r;
}

std::unique_ptr<TraceReader> TraceReader::from_memory(std::string_view data, std::string name) {
  std::unique_ptr<TraceReader> r(new TraceReader());
  r->name_ = std::move(name);
  r->data_ = data;
  r->load();
  return r;
}

TraceReader::~TraceReader() {
  if (map_) {
    unguard_mapping(map_);
    ::munmap(map_, map_len_);
  }
}

void TraceReader::fail(uint64_t offset, const std::string& what) const {
  throw TraceError(name_ + ": offset " + std::to_string(offset) + ": " + what);
}

uint64_t TraceReader::thread_event_count(uint32_t t) const {
  uint64_t n = 0;
  for (uint32_t i : thread_chunks(t)) n += chunks_[i].events;
  return n;
}

uint64_t TraceReader::thread_end_seq(uint32_t t) const {
  std::call_once(ends_once_, [this] {
    std::vector<uint64_t> ends(active_.size(), UINT64_MAX);
    ChunkDecoder d;
    std::vector<Event> batch(256);
    for (size_t i = 0; i < active_.size(); ++i) {
      d.start(*this, chunks_[lists_[i].back()]);
      Event last{};
      last.op = Op::lost;
      for (size_t n; (n = d.next(batch.data(), batch.size())) != 0;) last = batch[n - 1];
      d.release();
      if (last.op == Op::thread_end) ends[i] = last.seq;
    }
    end_seqs_ = std::move(ends);
  });
  auto it = std::lower_bound(active_.begin(), active_.end(), t);
  if (it == active_.end() || *it != t) return UINT64_MAX;
  return end_seqs_[static_cast<size_t>(it - active_.begin())];
}

const std::vector<uint32_t>& TraceReader::thread_chunks(uint32_t t) const {
  static const std::vector<uint32_t> kNone;
  auto it = std::lower_bound(active_.begin(), active_.end(), t);
  if (it == active_.end() || *it != t) return kNone;
  return lists_[static_cast<size_t>(it - active_.begin())];
}

const ThreadInfo& TraceReader::thread_info(uint32_t t) const {
  static const ThreadInfo kNone;
  auto it =
      std::lower_bound(threads_.begin(), threads_.end(), t, [](const auto& e, uint32_t x) { return e.first < x; });
  return it != threads_.end() && it->first == t ? it->second : kNone;
}

void TraceReader::add_chunk(const ChunkRef& c) {
  if (c.thread >= kMaxThreads)
    fail(c.offset, "chunk names thread " + std::to_string(c.thread) + ", beyond the limit of 2^24 threads");
  if (c.events == 0 || c.last_seq < c.first_seq || c.last_seq - c.first_seq < c.events - 1)
    fail(c.offset, "chunk header is inconsistent (events/seq range)");
  if (c.events > kMaxChunkRawSize)  // every event takes at least its op byte
    fail(c.offset, "chunk claims " + std::to_string(c.events) + " events, more than a chunk can hold");
  auto [it, fresh] = loading_slot_.try_emplace(c.thread, static_cast<uint32_t>(active_.size()));
  if (fresh) {
    active_.push_back(c.thread);
    lists_.emplace_back();
  }
  auto& list = lists_[it->second];
  if (!list.empty() && chunks_[list.back()].last_seq >= c.first_seq)
    fail(c.offset, "chunk of thread " + std::to_string(c.thread) + " overlaps the previous chunk of that thread");
  list.push_back(static_cast<uint32_t>(chunks_.size()));
  chunks_.push_back(c);
  events_ += c.events;
}

// Sorts the active threads (and their chunk lists) by thread index.
void TraceReader::finish_threads() {
  std::vector<uint32_t> order(active_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return active_[a] < active_[b]; });
  std::vector<uint32_t> active(order.size());
  std::vector<std::vector<uint32_t>> lists(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    active[i] = active_[order[i]];
    lists[i] = std::move(lists_[order[i]]);
  }
  active_ = std::move(active);
  lists_ = std::move(lists);
  loading_slot_ = {};
}

void TraceReader::load() {
  const auto* d = reinterpret_cast<const uint8_t*>(data_.data());
  const size_t size = data_.size();
  if (size == 0) throw TraceError(name_ + ": empty file, not a heaplab trace");
  if (size < 8 || std::memcmp(d, kFileMagic, 8) != 0) fail(0, "not a heaplab trace (bad magic)");
  if (size < kFileHeaderSize) fail(size, "file ends inside the 32-byte header");
  major_ = load_u16(d + 8);
  minor_ = load_u16(d + 10);
  if (major_ != kFormatMajor)
    fail(8, "unsupported trace format version " + std::to_string(major_) + "." + std::to_string(minor_) +
                " (this heaplab reads version " + std::to_string(kFormatMajor) + ".x)");
  if (load_u64(d + 24) != plain_checksum(d, 24)) fail(0, "header checksum mismatch (corrupt header)");
  const uint32_t flags = load_u32(d + 12);
  has_time_ = flags & kFileHasTime;

  if (size >= kFileHeaderSize + kFooterSize) {
    const uint8_t* f = d + size - kFooterSize;
    if (std::memcmp(f, kFooterMagic, 8) == 0 && load_u64(f + 24) == plain_checksum(f, 24)) {
      load_from_index(load_u64(f + 8), load_u64(f + 16));
      complete_ = true;
      release_pages();
      return;
    }
  }
  scan();
  release_pages();
}

void TraceReader::release_later(uintptr_t lo, uintptr_t hi) const {
  constexpr uintptr_t kReleaseBatch = uintptr_t{8} << 20;
  constexpr size_t kRanges = 64;
  std::lock_guard<std::mutex> lock(release_mu_);
  // Merged with a range it touches or overlaps (chunks are decoded mostly
  // in file order: the ranges grow at their ends).
  bool merged = false;
  for (auto& [a, b] : to_release_)
    if (lo <= b && hi >= a) {
      a = std::min(a, lo);
      b = std::max(b, hi);
      merged = true;
      break;
    }
  if (!merged) to_release_.emplace_back(lo, hi);
  uintptr_t total = 0;
  for (const auto& [a, b] : to_release_) total += b - a;
  if (total < kReleaseBatch && to_release_.size() < kRanges) return;
  for (const auto& [a, b] : to_release_) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
  to_release_.clear();
}

// Reading the index (or scanning the blocks) touched a page of every block
// and the kernel mapped its neighbours: none of it is needed until a chunk
// is decoded, which maps what it reads (and lets it go again).
void TraceReader::release_pages() const {
  if (map_) madvise(map_, map_len_, MADV_DONTNEED);
}

// Parses the summary of a CHNK block's payload at `off` (block header offset).
static ChunkRef parse_chunk_header(const uint8_t* payload, uint64_t off) {
  ChunkRef c;
  c.offset = off;
  c.thread = load_u32(payload);
  c.events = load_u32(payload + 4);
  c.first_seq = load_u64(payload + 8);
  c.last_seq = load_u64(payload + 16);
  c.first_time = load_u64(payload + 24);
  c.last_time = load_u64(payload + 32);
  return c;
}

// THRD payload: u32 count, then per entry {u32 thread, u64 os_tid, u32
// name length, name}, by strictly ascending thread index.
static void parse_threads(const uint8_t* p, uint32_t len, std::vector<std::pair<uint32_t, ThreadInfo>>& out,
                          const std::function<void(const std::string&)>& bad) {
  if (len < 4) bad("thread table too short");
  const uint32_t n = load_u32(p);
  if (n > (len - 4) / 16) bad("thread table has more entries than fit");
  size_t pos = 4;
  out.clear();
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (len - pos < 16) bad("thread table truncated");
    const uint32_t thread = load_u32(p + pos);
    ThreadInfo ti;
    ti.os_tid = load_u64(p + pos + 4);
    const uint32_t nl = load_u32(p + pos + 12);
    pos += 16;
    if (len - pos < nl) bad("thread table truncated");
    if (thread >= kMaxThreads) bad("thread table names a thread beyond the limit of 2^24");
    if (!out.empty() && thread <= out.back().first) bad("thread table is not in ascending order");
    ti.name.assign(reinterpret_cast<const char*>(p + pos), nl);
    pos += nl;
    out.emplace_back(thread, std::move(ti));
  }
  if (pos != len) bad("thread table has trailing bytes");
}

void TraceReader::load_from_index(uint64_t index_offset, uint64_t total) {
  const auto* d = reinterpret_cast<const uint8_t*>(data_.data());
  const size_t size = data_.size();
  const size_t body_end = size - kFooterSize;
  // Reads a whole, checksummed block of `type` at `off`; returns its payload.
  auto block = [&](uint64_t off, uint32_t type, const char* what) -> std::string_view {
    if (off < kFileHeaderSize || off > body_end || body_end - off < kBlockHeaderSize)
      fail(size - kFooterSize, std::string("the ") + what + " block offset points outside the file");
    const uint32_t t = load_u32(d + off);
    const uint32_t len = load_u32(d + off + 4);
    if (t != type) fail(off, std::string("expected the ") + what + " block here");
    if (len > kMaxBlockPayload) fail(off, std::string(what) + " block length is impossible");
    if (body_end - off - kBlockHeaderSize < len) fail(off, std::string(what) + " block runs past the end");
    const uint8_t* p = d + off + kBlockHeaderSize;
    if (load_u64(d + off + 8) != block_checksum(t, p, len))
      fail(off, std::string(what) + " block checksum mismatch (corrupt data)");
    return {reinterpret_cast<const char*>(p), len};
  };
  std::string_view idx = block(index_offset, kBlockIndex, "index");
  const auto* ip = reinterpret_cast<const uint8_t*>(idx.data());
  if (idx.size() < 24) fail(index_offset, "index block too short");
  const uint64_t meta_off = load_u64(ip);
  const uint64_t threads_off = load_u64(ip + 8);
  const uint64_t n = load_u64(ip + 16);
  if (n > (idx.size() - 24) / kIndexEntrySize || idx.size() - 24 != n * kIndexEntrySize)
    fail(index_offset, "index block size does not match its chunk count");
  std::string_view meta = block(meta_off, kBlockMeta, "metadata");
  metadata_.assign(meta);
  std::string_view thr = block(threads_off, kBlockThreads, "thread table");
  parse_threads(reinterpret_cast<const uint8_t*>(thr.data()), static_cast<uint32_t>(thr.size()), threads_,
                [&](const std::string& w) { fail(threads_off, w); });
  chunks_.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* e = ip + 24 + i * kIndexEntrySize;
    ChunkRef c;
    c.offset = load_u64(e);
    c.thread = load_u32(e + 8);
    c.events = load_u32(e + 12);
    c.first_seq = load_u64(e + 16);
    c.last_seq = load_u64(e + 24);
    c.first_time = load_u64(e + 32);
    c.last_time = load_u64(e + 40);
    if (c.offset < kFileHeaderSize || c.offset >= index_offset)
      fail(index_offset, "index entry " + std::to_string(i) + " points outside the chunk area");
    add_chunk(c);
  }
  if (events_ != total)
    fail(size - kFooterSize, "footer says " + std::to_string(total) + " events, index has " + std::to_string(events_));
  // 1.1: a MEMX block sits between the last chunk and the thread table.
  if (minor_ >= 1) {
    uint64_t off = kFileHeaderSize + kBlockHeaderSize + load_u32(d + kFileHeaderSize + 4);  // after the first META
    // After the last chunk in the file (only its header is read: reading
    // every chunk's would map a page, and its neighbours, of each).
    const ChunkRef* last = nullptr;
    for (const ChunkRef& c : chunks_)
      if (c.offset <= threads_off && threads_off - c.offset >= kBlockHeaderSize && (!last || c.offset > last->offset))
        last = &c;
    if (last) off = std::max<uint64_t>(off, last->offset + kBlockHeaderSize + load_u32(d + last->offset + 4));
    if (off > threads_off) fail(threads_off, "the chunks run past the thread table");
    while (off < threads_off && threads_off - off >= kBlockHeaderSize) {
      const uint32_t t = load_u32(d + off), len = load_u32(d + off + 4);
      if (len > threads_off - off - kBlockHeaderSize) fail(off, "block runs into the thread table");
      // Every block here is checked: a damaged type must not pass as a later minor's block.
      const uint8_t* p = d + off + kBlockHeaderSize;
      if (load_u64(d + off + 8) != block_checksum(t, p, len)) fail(off, "block checksum mismatch (corrupt data)");
      if (t == kBlockMemory) load_memory(p, len, off);
      if (t == kBlockAddresses) add_address_block(p, len, off);
      off += kBlockHeaderSize + len;
    }
    // A complete trace's seqs are 0 .. total - 1: its addresses name those.
    for (const AddressBlockRef& b : addresses_)
      if (b.first_seq > total || b.count > total - b.first_seq)
        fail(b.offset, "address block names events up to seq " + std::to_string(b.first_seq + b.count - 1) +
                           ", past the trace's last (" + std::to_string(total) + " events)");
  }
  finish_threads();
}

void TraceReader::load_memory(const uint8_t* payload, uint32_t len, uint64_t off) {
  // Every record is checked now, one batch at a time, and none is kept:
  // readers go through them again with a MemoryCursor.
  const std::string_view block(reinterpret_cast<const char*>(payload), len);
  MemoryRecordStream in(block);
  MemoryChecker check;
  uint64_t count = 0, ops[kMemOpMax + 1] = {}, object_pages = 0;
  std::map<uint32_t, ThreadMemoryCalls> threads;
  std::vector<MemoryEvent> batch(1024);
  while (size_t n = in.next(batch.data(), batch.size())) {
    for (size_t i = 0; i < n; ++i) {
      const MemoryEvent& e = batch[i];
      if (std::string bad = check.check(e); !bad.empty()) fail(off, bad);
      ++ops[unsigned(e.op)];
      object_pages += e.op == MemOp::object && e.pages != kUnknownPages;
      if (e.op == MemOp::object || e.op == MemOp::latency) continue;
      ThreadMemoryCalls& t = threads[e.thread];
      ++t.calls;
      t.remaps += e.op == MemOp::remap;
      t.first_after = std::min(t.first_after, e.after);
      t.last_after = std::max(t.last_after, e.after);
    }
    count += n;
  }
  if (!in.error().empty()) fail(off, in.error());
  memory_block_ = in.declared() != 0 || count != 0 ? block : std::string_view();
  memory_block_offset_ = off;
  memory_count_ = count;
  memory_whole_ = count == in.declared();
  std::copy(std::begin(ops), std::end(ops), memory_ops_);
  memory_threads_ = std::move(threads);
  memory_object_pages_ = object_pages;
}

std::vector<MemoryEvent> TraceReader::read_memory_events() const {
  std::vector<MemoryEvent> out;
  out.reserve(memory_count_);
  MemoryCursor cur(*this);
  while (const MemoryEvent* e = cur.next()) out.push_back(*e);
  return out;
}

void TraceReader::release_memory_block(size_t from, size_t to) const {
  if (!map_ || to <= from) return;
  const auto* base = reinterpret_cast<const uint8_t*>(memory_block_.data());
  const uintptr_t map_lo = reinterpret_cast<uintptr_t>(map_);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base + from) & ~uintptr_t{4095};
  const uintptr_t hi = std::min((reinterpret_cast<uintptr_t>(base + to) + 4095) & ~uintptr_t{4095},
                                (map_lo + map_len_ + 4095) & ~uintptr_t{4095});
  if (hi > lo && lo >= map_lo) release_later(lo, hi);
}

MemoryCursor::MemoryCursor(const TraceReader& r) : r_(r) {
  if (!r.memory_block_.empty()) in_ = std::make_unique<MemoryRecordStream>(r.memory_block_);
}

bool MemoryCursor::refill() {
  if (!in_) return false;
  if (buf_.empty()) buf_.resize(512);
  len_ = in_->next(buf_.data(), buf_.size());
  pos_ = 0;
  if (!in_->error().empty())
    r_.fail(r_.memory_block_offset_, in_->error() + " (the file changed since it was opened?)");
  // What has been read is given back 8 MiB at a time (a long block's pages
  // would otherwise stay mapped, in this process's resident set).
  if (const size_t done = in_->consumed(); done - released_ >= (size_t{8} << 20) || len_ == 0) {
    r_.release_memory_block(released_, done);
    released_ = done;
  }
  if (len_ == 0) in_.reset();
  return len_ != 0;
}

void TraceReader::add_address_block(const uint8_t* payload, uint32_t len, uint64_t off) {
  AddressBlockRef b;
  b.offset = off;
  std::string error;
  if (!address_block_header({reinterpret_cast<const char*>(payload), len}, b.first_seq, b.count, error))
    fail(off, error);
  if (b.count == 0) return;  // a later layout
  // In ascending order of seq, never overlapping: a reader finds an event's
  // block by binary search.
  if (!addresses_.empty() && b.first_seq < addresses_.back().first_seq + addresses_.back().count)
    fail(off, "address block overlaps the one before it");
  addresses_.push_back(b);
}

void TraceReader::scan() {
  const auto* d = reinterpret_cast<const uint8_t*>(data_.data());
  const size_t size = data_.size();
  uint64_t off = kFileHeaderSize;
  bool have_meta = false;
  bool saw_index = false;
  while (off < size) {
    const uint64_t left = size - off;
    if (saw_index && left == kFooterSize) fail(off, "footer corrupt (bad magic or checksum)");
    if (saw_index && left < kFooterSize) {
      warning_ =
          "trace is truncated: the footer at offset " + std::to_string(off) + " has " + fmt_bytes(left) + " of 32";
      break;
    }
    if (left < kBlockHeaderSize) {
      warning_ = "trace is truncated: " + fmt_bytes(left) + " at offset " + std::to_string(off) +
                 " are an incomplete block header";
      break;
    }
    const uint32_t type = load_u32(d + off);
    const uint32_t len = load_u32(d + off + 4);
    if (len > kMaxBlockPayload) fail(off, "block length " + std::to_string(len) + " is impossible (corrupt data)");
    if (left - kBlockHeaderSize < len) {
      warning_ = "trace is truncated: the block at offset " + std::to_string(off) + " needs " +
                 fmt_bytes(kBlockHeaderSize + uint64_t{len}) + " but only " + fmt_bytes(left) + " remain";
      break;
    }
    const uint8_t* p = d + off + kBlockHeaderSize;
    if (load_u64(d + off + 8) != block_checksum(type, p, len)) fail(off, "block checksum mismatch (corrupt data)");
    // A block type this version does not know, with a valid checksum, comes
    // from a later minor version: skipped.
    switch (type) {
      case kBlockMeta:
        metadata_.assign(reinterpret_cast<const char*>(p), len);
        have_meta = true;
        break;
      case kBlockChunk:
        if (len < kChunkHeaderSize) fail(off, "chunk block too short");
        add_chunk(parse_chunk_header(p, off));
        break;
      case kBlockThreads:
        parse_threads(p, len, threads_, [&](const std::string& w) { fail(off, w); });
        break;
      case kBlockIndex:
        saw_index = true;
        break;
      case kBlockMemory:
        load_memory(p, len, off);
        break;
      case kBlockAddresses:
        add_address_block(p, len, off);
        break;
    }
    off += kBlockHeaderSize + len;
  }
  if (!have_meta) fail(kFileHeaderSize, "no metadata block (file too short or corrupt)");
  if (warning_.empty()) warning_ = "trace is truncated: the footer is missing after offset " + std::to_string(off);
  warning_ += "; read " + std::to_string(chunks_.size()) + " complete chunks with " + std::to_string(events_) +
              " events; events after offset " + std::to_string(off) + " are lost";
  finish_threads();
}

// ---------------------------------------------------------------- addresses

uint64_t AddressCursor::at(uint64_t seq) {
  const auto& blocks = r_.address_blocks();
  if (!(cur_ < blocks.size() && seq >= blocks[cur_].first_seq && seq - blocks[cur_].first_seq < blocks[cur_].count)) {
    auto it = std::upper_bound(blocks.begin(), blocks.end(), seq,
                               [](uint64_t s, const AddressBlockRef& b) { return s < b.first_seq; });
    if (it == blocks.begin()) return 0;
    --it;
    if (seq - it->first_seq >= it->count) return 0;
    cur_ = size_t(it - blocks.begin());
    const auto* d = reinterpret_cast<const uint8_t*>(r_.data_.data());
    const uint32_t len = load_u32(d + it->offset + 4);
    std::string error;
    auto b = decode_address_block({r_.data_.data() + it->offset + kBlockHeaderSize, len}, error);
    if (!b) r_.fail(it->offset, error);
    block_ = std::move(b->addresses);
  }
  return block_[seq - blocks[cur_].first_seq];
}

// ---------------------------------------------------------------- decoding

// One zstd context per OS thread, shared by every decoder on it: a context
// is only used inside start(), and a merged read over many threads would
// otherwise hold ~100 KB per trace thread.
static ZSTD_DCtx* thread_dctx() {
  struct Holder {
    ZSTD_DCtx* ctx = ZSTD_createDCtx();
    ~Holder() { ZSTD_freeDCtx(ctx); }
  };
  thread_local Holder h;
  return h.ctx;
}

ChunkDecoder::ChunkDecoder() = default;
ChunkDecoder::~ChunkDecoder() = default;

void ChunkDecoder::corrupt(const char* what) const {
  r_->fail(c_.offset, std::string("chunk: ") + what + " (corrupt data)");
}

void ChunkDecoder::start(const TraceReader& r, const ChunkRef& c) {
  r_ = &r;
  c_ = c;
  const auto* d = reinterpret_cast<const uint8_t*>(r.data_.data());
  const size_t size = r.data_.size();
  if (c.offset > size || size - c.offset < kBlockHeaderSize + kChunkHeaderSize)
    corrupt("runs past the end of the file");
  const uint8_t* h = d + c.offset;
  const uint32_t len = load_u32(h + 4);
  if (load_u32(h) != kBlockChunk) corrupt("index points at a block that is not a chunk");
  if (len < kChunkHeaderSize || size - c.offset - kBlockHeaderSize < len)
    corrupt("block length runs past the end of the file");
  const uint8_t* p = h + kBlockHeaderSize;
  if (load_u64(h + 8) != block_checksum(kBlockChunk, p, len)) corrupt("checksum mismatch");
  const ChunkRef hc = parse_chunk_header(p, c.offset);
  if (hc.thread != c.thread || hc.events != c.events || hc.first_seq != c.first_seq || hc.last_seq != c.last_seq ||
      hc.first_time != c.first_time || hc.last_time != c.last_time)
    corrupt("header does not match the index");
  const uint64_t id_start = load_u64(p + 40);
  const uint64_t ref_start = load_u64(p + 48);
  const uint8_t codec = p[56];
  const uint8_t flags = p[57];
  const uint32_t raw_size = load_u32(p + 60);
  uint64_t per_event = 1;
  for (unsigned i = 0; i < kColumnCount; ++i) {
    width_[i] = p[64 + i];
    if (width_[i] > 8) corrupt("column width above 8 bytes");
    per_event += width_[i];
  }
  if (uint64_t{c.events} * per_event != raw_size) corrupt("column widths do not add up to the data size");
  for (unsigned i = 64 + kColumnCount; i < kChunkHeaderSize; ++i)
    if (p[i] != 0) corrupt("reserved header bytes are set");
  if (p[58] != 0 || p[59] != 0 || (flags & ~kChunkHasTime) != 0) corrupt("reserved header bits are set");
  const uint8_t* z = p + kChunkHeaderSize;
  const size_t zlen = len - kChunkHeaderSize;
  if (raw_size > kMaxChunkRawSize) corrupt("decoded size too large");
  // Columns are read with 8-byte loads: keep zeroed padding after them.
  buf_.resize(raw_size + kDecodePadding);
  std::memset(buf_.data() + raw_size, 0, kDecodePadding);
  if (codec == kCodecZstd) {
    ZSTD_DCtx* dctx = thread_dctx();
    if (!dctx) corrupt("cannot create a zstd context");
    size_t got = ZSTD_decompressDCtx(dctx, buf_.data(), raw_size, z, zlen);
    if (ZSTD_isError(got)) corrupt((std::string("zstd: ") + ZSTD_getErrorName(got)).c_str());
    if (got != raw_size) corrupt("decompressed size differs from the header");
  } else if (codec == kCodecLz4) {
    if (zlen > INT32_MAX) corrupt("compressed size too large");
    int got = LZ4_decompress_safe(reinterpret_cast<const char*>(z), reinterpret_cast<char*>(buf_.data()),
                                  static_cast<int>(zlen), static_cast<int>(raw_size));
    if (got < 0) corrupt("lz4 data is invalid");
    if (static_cast<uint32_t>(got) != raw_size) corrupt("decompressed size differs from the header");
  } else if (codec == kCodecNone) {
    if (zlen != raw_size) corrupt("stored size differs from the header");
    std::memcpy(buf_.data(), z, raw_size);
  } else {
    corrupt("unknown compression codec");
  }
  // The chunk's bytes are decoded: unmap their pages from this process (the
  // file keeps them; a neighbour's page dropped with them faults back in
  // from the page cache). Reading a trace longer than memory keeps its
  // resident set at the chunks being decoded, not the whole file.
  // (Only a file the reader mapped: memory given to from_memory() is the
  // caller's, and would be lost.)
  if (r.map_) {
    // (64 KiB more on each side: the kernel maps up to 64 KiB around a
    // faulting page, which would otherwise stay.)
    constexpr uintptr_t kAround = 65536;
    const uintptr_t base = reinterpret_cast<uintptr_t>(d);
    const uintptr_t start = reinterpret_cast<uintptr_t>(h);
    const uintptr_t lo = (start - base > kAround ? start - kAround : base) & ~uintptr_t{4095};
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + len + kAround;
    const uintptr_t map_end = (base + size + 4095) & ~uintptr_t{4095};
    const uintptr_t hi = std::min((end + 4095) & ~uintptr_t{4095}, map_end);
    if (hi > lo) r.release_later(lo, hi);
  }
  const uint8_t* raw = buf_.data();
  ops_ = raw;
  const uint8_t* q = raw + c.events;
  for (unsigned i = 0; i < kColumnCount; ++i) {
    p_[i] = q;
    q += size_t{c.events} * width_[i];
  }
  remaining_ = c.events;
  thread_ = c.thread;
  has_time_ = flags & kChunkHasTime;
  if (has_time_ != r.has_time_) corrupt("time flag differs from the file header");
  if (!has_time_ && width_[kColTime] != 0) corrupt("time column present without the time flag");
  // The loop is specialised on the chunk's constant shape. Align and count
  // columns are absent (width 0) in most chunks: a variant without them
  // stores zeros instead of loading.
  const unsigned shape = (width_[kColSeq] != 0 ? 4u : 0u) | (has_time_ ? 2u : 0u) |
                         (width_[kColAlign] != 0 || width_[kColCount] != 0 ? 1u : 0u);
  static constexpr DecodeFn kByShape[8] = {&decode<false, false, false>, &decode<false, false, true>,
                                           &decode<false, true, false>,  &decode<false, true, true>,
                                           &decode<true, false, false>,  &decode<true, false, true>,
                                           &decode<true, true, false>,   &decode<true, true, true>};
  decode_ = kByShape[shape];
  seq_next_ = c.first_seq;
  time_prev_ = c.first_time;
  id_next_ = id_start;
  ref_ = ref_start;
}

namespace {

// Per op byte (op code plus result bits): all-ones masks for the hot
// fields, so the decode loop selects with an AND instead of branching, and
// the field bits; a producing op's id is absent when its null-result bit is
// set; kInvalidOp marks unknown codes.
constexpr uint8_t kInvalidOp = 0x80;
struct ByteInfo {
  uint64_t consume = 0, produce = 0, size = 0, align = 0, count = 0;
  uint8_t fields = 0;
};
struct ByteInfoTable {
  ByteInfo b[256];
  constexpr ByteInfoTable() : b() {
    for (unsigned i = 0; i < 256; ++i) {
      const unsigned op = i & kOpMask;
      if (op >= kOpCount) {
        b[i].fields = kInvalidOp;
        continue;
      }
      uint8_t f = kOpInfo[op].fields;
      if (i & kOpNullBit) f &= static_cast<uint8_t>(~kProduces);
      b[i].fields = f;
      b[i].consume = (f & kConsumes) ? ~uint64_t{0} : 0;
      b[i].produce = (f & kProduces) ? ~uint64_t{0} : 0;
      b[i].size = (f & kSize) ? ~uint64_t{0} : 0;
      b[i].align = (f & kAlign) ? ~uint64_t{0} : 0;
      b[i].count = (f & kCount) ? ~uint64_t{0} : 0;
    }
  }
};
constexpr ByteInfoTable kByteInfo;

}  // namespace

namespace {
constexpr uint64_t kWidthMask[9] = {
    0, 0xff, 0xffff, 0xffffff, 0xffffffff, 0xffffffffff, 0xffffffffffff, 0xffffffffffffff, ~uint64_t{0}};
}  // namespace

// The decode loop, specialised on the chunk's shape (seq gaps, time, align/count
// columns present). Each
// column holds one fixed-width value per event, so every load is at a
// pointer that advances by a chunk constant: no bounds checks (the sizes
// were validated in start()) and no dependency between events but the
// predictors. Values in slots of fields an op does not carry are ignored.
template <bool kSeq, bool kTime, bool kAux>
size_t ChunkDecoder::decode(ChunkDecoder* d, Event* out, size_t n) {
  using bytes::load_u64;
  using bytes::unzigzag;
  const uint8_t* ops = d->ops_;
  const uint8_t* const ops_end = ops + n;
  uint64_t seq_next = d->seq_next_, time_prev = d->time_prev_, id_next = d->id_next_, ref = d->ref_;
  const uint8_t *ps = d->p_[kColSeq], *pt = d->p_[kColTime], *po = d->p_[kColOld], *pi = d->p_[kColId],
                *pz = d->p_[kColSize], *pa = d->p_[kColAlign], *pc = d->p_[kColCount];
  const size_t ws = d->width_[kColSeq], wt = d->width_[kColTime], wo = d->width_[kColOld], wi = d->width_[kColId],
               wz = d->width_[kColSize], wa = d->width_[kColAlign], wc = d->width_[kColCount];
  const uint64_t ms = kWidthMask[ws], mt = kWidthMask[wt], mo = kWidthMask[wo], mi = kWidthMask[wi],
                 mz = kWidthMask[wz], ma = kWidthMask[wa], mc = kWidthMask[wc];
  const uint32_t thread = d->thread_;
  for (; ops != ops_end; ++ops, ++out) {
    const uint8_t b = *ops;
    const ByteInfo& bi = kByteInfo.b[b];
    if (bi.fields & kInvalidOp) [[unlikely]]
      d->corrupt("invalid op code");
    Event& e = *out;
    if constexpr (kSeq) {
      e.seq = seq_next + (load_u64(ps) & ms);
      ps += ws;
    } else {
      e.seq = seq_next;
    }
    seq_next = e.seq + 1;
    if constexpr (kTime) {
      time_prev += static_cast<uint64_t>(unzigzag(load_u64(pt) & mt));
      pt += wt;
      e.time = time_prev;
    } else {
      e.time = 0;
    }
    // Consumed object: ref - unzigzag(value); it becomes the reference.
    ref -= static_cast<uint64_t>(unzigzag(load_u64(po) & mo & bi.consume));
    po += wo;
    e.old = ref & bi.consume;
    // Produced object: id_next + value; it becomes the reference.
    const uint64_t id = id_next + (load_u64(pi) & mi & bi.produce);
    pi += wi;
    e.id = id & bi.produce;
    id_next += (id + 1 - id_next) & bi.produce;
    ref ^= (ref ^ id) & bi.produce;
    e.size = load_u64(pz) & mz & bi.size;
    pz += wz;
    if constexpr (kAux) {
      e.align = load_u64(pa) & ma & bi.align;
      pa += wa;
      e.count = load_u64(pc) & mc & bi.count;
      pc += wc;
    } else {
      e.align = 0;
      e.count = 0;
    }
    e.thread = thread;
    e.op = static_cast<Op>(b & kOpMask);
    e.flags = static_cast<uint8_t>(b >> 6);
  }
  d->p_[kColSeq] = ps;
  d->p_[kColTime] = pt;
  d->p_[kColOld] = po;
  d->p_[kColId] = pi;
  d->p_[kColSize] = pz;
  d->p_[kColAlign] = pa;
  d->p_[kColCount] = pc;
  d->ops_ = ops;
  d->seq_next_ = seq_next;
  d->time_prev_ = time_prev;
  d->id_next_ = id_next;
  d->ref_ = ref;
  return n;
}

size_t ChunkDecoder::next(Event* out, size_t max) {
  const size_t n = std::min<size_t>(max, remaining_);
  decode_(this, out, n);
  remaining_ -= static_cast<uint32_t>(n);
  if (remaining_ == 0 && seq_next_ - 1 != c_.last_seq) corrupt("last seq differs from the header");
  return n;
}

// ---------------------------------------------------------------- cursors

ThreadCursor::ThreadCursor(const TraceReader& r, uint32_t thread) : r_(r), chunks_(r.thread_chunks(thread)) {}

size_t ThreadCursor::next(Event* out, size_t max) {
  while (dec_.remaining() == 0) {
    if (pos_ >= chunks_.size()) {
      dec_.release();  // done: give the decoded chunk's memory back
      return 0;
    }
    dec_.start(r_, r_.chunks()[chunks_[pos_++]]);
  }
  return dec_.next(out, max);
}

uint64_t TraceReader::decoded_bytes_at_once() const {
  if (decoded_at_once_ != UINT64_MAX) return decoded_at_once_;  // (read once a reader: a header a chunk)
  const auto* d = reinterpret_cast<const uint8_t*>(data_.data());
  uint64_t sum = 0;
  for (const std::vector<uint32_t>& list : lists_) {
    uint64_t most = 0;
    for (uint32_t i : list) {
      const ChunkRef& c = chunks_[i];
      if (c.offset > data_.size() || data_.size() - c.offset < kBlockHeaderSize + kChunkHeaderSize) continue;
      // raw_size, as far as it can be true (the decoder refuses more: the op
      // byte and seven 8-byte values an event, 64 MiB at most)
      const uint64_t raw = load_u32(d + c.offset + kBlockHeaderSize + 60);
      most = std::max(most, std::min({raw, uint64_t{c.events} * (1 + 8 * kColumnCount), uint64_t{kMaxChunkRawSize}}));
    }
    sum += most;
  }
  return decoded_at_once_ = sum;
}

namespace {

std::string gib(uint64_t bytes) {
  char buf[32];
  if (bytes >= uint64_t{1} << 30)
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(uint64_t{1} << 30));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(uint64_t{1} << 20));
  return buf;
}

}  // namespace

MergedCursor::MergedCursor(const TraceReader& r) {
  // In global order, each thread's current chunk is held decoded: refused
  // at once if the chunks' own headers say that cannot fit (a file of a few
  // KiB can declare 64 MiB chunks for many threads).
  if (r.active_threads().size() > 16) {
    const uint64_t need = r.decoded_bytes_at_once(), available = memory_available();
    if (available != 0 && need > available)
      throw TraceError(r.name() + ": reading its " + std::to_string(r.active_threads().size()) +
                       " threads in order needs " + gib(need) +
                       " at once (a decoded chunk a thread, as the chunk headers declare), more than the " +
                       gib(available) + " this machine has available");
  }
  const size_t batch = r.active_threads().size() <= 1 ? 4096 : 512;
  for (uint32_t t : r.active_threads()) {
    Source s;
    s.cursor = std::make_unique<ThreadCursor>(r, t);
    s.buf.resize(std::min<uint64_t>(batch, r.thread_event_count(t)));
    sources_.push_back(std::move(s));
  }
}

bool MergedCursor::refill(Source& s) {
  s.pos = 0;
  s.len = s.cursor->next(s.buf.data(), s.buf.size());
  return s.len != 0;
}

size_t MergedCursor::next(Event* out, size_t max) {
  auto head = [this](uint32_t a) {
    const Source& x = sources_[a];
    return x.buf[x.pos].seq;
  };
  auto greater = [&](uint32_t a, uint32_t b) { return head(a) > head(b); };
  if (!started_) {
    started_ = true;
    for (uint32_t t = 0; t < sources_.size(); ++t)
      if (refill(sources_[t])) heap_.push_back(t);
    std::make_heap(heap_.begin(), heap_.end(), greater);
  }
  size_t n = 0;
  if (heap_.size() == 1) {  // one thread left: copy runs
    Source& s = sources_[heap_[0]];
    while (n < max) {
      if (s.pos == s.len && !refill(s)) {
        heap_.clear();
        break;
      }
      const size_t k = std::min(max - n, s.len - s.pos);
      std::copy_n(s.buf.begin() + static_cast<ptrdiff_t>(s.pos), k, out + n);
      s.pos += k;
      n += k;
    }
    return n;
  }
  while (n < max && !heap_.empty()) {
    Source& s = sources_[heap_[0]];
    // A run: this thread's events up to the next head of the others (the
    // smaller of the top's children) go out without a heap operation each
    // (threads often make a few calls in a row). The thread stays at the
    // top meanwhile, then moves down to its place in one pass.
    const size_t m = heap_.size();
    uint64_t bound = m > 1 ? head(heap_[1]) : UINT64_MAX;
    if (m > 2) bound = std::min(bound, head(heap_[2]));
    do {
      out[n++] = s.buf[s.pos++];
    } while (n < max && s.pos < s.len && s.buf[s.pos].seq < bound);
    if (s.pos == s.len && !refill(s)) {
      std::pop_heap(heap_.begin(), heap_.end(), greater);
      heap_.pop_back();
    } else {
      replace_heap_top(heap_, heap_[0], greater);
    }
  }
  return n;
}

}  // namespace heaplab::trace
