#include "capture/format/trace_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <lz4.h>
#include <zstd.h>

#include <cerrno>
#include <algorithm>
#include <map>
#include <memory>
#include <cstring>
#include <vector>

#include "capture/format/address_block.h"
#include "capture/format/bytes.h"
#include "capture/format/id_map.h"
#include "capture/format/look_ahead.h"
#include "capture/format/memory_available.h"

namespace heaplab::trace {
namespace {

using bytes::put_u16;
using bytes::put_u32;
using bytes::put_u64;
using bytes::put_u8;
using bytes::zigzag;

struct IndexEntry {
  uint64_t offset;
  uint32_t thread;
  uint32_t events;
  uint64_t first_seq, last_seq, first_time, last_time;
};

// Encoder state of one thread: the open chunk's staged column values (one
// per event and column, 0 where the op lacks the field) plus the running
// predictors, which continue across chunks (each chunk stores their start).
struct ThreadEncoder {
  // Staging arrays, all with `cap` slots (grown together, allocated on
  // first use: threads are cheap); `n` are in use. The align and count
  // columns, zero for most calls, only once a value of either is not zero
  // (until the arrays are given back): 41 bytes an event staged, not 57.
  std::vector<uint8_t> ops;
  std::vector<uint64_t> col[kColumnCount];
  uint64_t* colp[kColumnCount] = {};  // col[k].data(), or null while not allocated
  bool rare = false;                  // whether the align and count columns are allocated
  uint64_t max[kColumnCount] = {};
  uint32_t n = 0;
  uint32_t cap = 0;
  uint64_t first_seq = 0, last_seq = 0, first_time = 0, last_time = 0;
  uint64_t seq_next = 0, time_prev = 0;
  uint64_t id_next = 1, ref = 0;
  uint64_t id_start = 1, ref_start = 0;
  uint32_t active_pos = 0;  // its place in TraceWriter::Impl::active
};

// Staged bytes per event at most (op byte and seven 64-bit values; 41 while
// a thread has had no align or count value).
constexpr size_t kStagedBytesPerEvent = 1 + 8 * kColumnCount;
// Bound on staging memory over all threads: past it, the thread with the
// most staged events is flushed early (many threads, large chunks), and
// flushed threads give their staging arrays back.
constexpr size_t kStagingBudget = size_t{32} << 20;
constexpr size_t kMaxStagedEvents = kStagingBudget / kStagedBytesPerEvent;
// What a thread with events costs the writer (measured: 637 MiB for 2^20
// threads of one call each, BENCHMARKS.md).
constexpr uint64_t kWriterBytesPerThread = 640;

// Writes the low W bytes of each value (8-byte stores; 8 bytes of slack).
template <unsigned W>
uint8_t* pack(uint8_t* out, const uint64_t* v, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i, out += W) std::memcpy(out, &v[i], 8);
  return out;
}

uint8_t* pack_width(unsigned w, uint8_t* out, const uint64_t* v, uint32_t n) {
  switch (w) {
    case 1:
      return pack<1>(out, v, n);
    case 2:
      return pack<2>(out, v, n);
    case 3:
      return pack<3>(out, v, n);
    case 4:
      return pack<4>(out, v, n);
    case 5:
      return pack<5>(out, v, n);
    case 6:
      return pack<6>(out, v, n);
    case 7:
      return pack<7>(out, v, n);
    case 8:
      return pack<8>(out, v, n);
    default:
      return out;
  }
}

unsigned width_of(uint64_t max) { return max == 0 ? 0 : (64 - static_cast<unsigned>(__builtin_clzll(max)) + 7) / 8; }

// The 32-byte file header.
std::string file_header(uint16_t minor, bool timestamps) {
  std::string hdr(kFileMagic, sizeof kFileMagic);
  put_u16(hdr, kFormatMajor);
  put_u16(hdr, minor);
  put_u32(hdr, timestamps ? uint32_t{kFileHasTime} : uint32_t{0});
  put_u64(hdr, 0);
  put_u64(hdr, plain_checksum(hdr.data(), hdr.size()));
  return hdr;
}

}  // namespace

struct TraceWriter::Impl {
  std::string path;
  WriterOptions opt;
  int fd = -1;
  bool closed = false;
  uint64_t offset = 0;
  uint64_t next_seq = 0;
  uint64_t last_id = 0;
  // Encoders by thread index in pages of 1,024, allocated on first use, so a
  // thread index costs memory only if it is used; `active` lists the used
  // indices.
  static constexpr unsigned kPageBits = 10;
  using Page = std::array<std::unique_ptr<ThreadEncoder>, 1u << kPageBits>;
  std::vector<std::unique_ptr<Page>> pages;
  std::vector<uint32_t> active;
  uint64_t encoders_made = 0;               // threads given an encoder so far (for the memory check)
  uint32_t cached_thread = UINT32_MAX;      // the last thread appended to,
  ThreadEncoder* cached_encoder = nullptr;  // and its encoder
  size_t staged_events = 0;
  size_t staged_capacity = 0;  // events the staging arrays of all threads can hold
  // The staging budget in events; one thread's full chunk always fits (an
  // import's chunks of 2^20 events stay whole).
  size_t max_staged() const { return std::max<size_t>(kMaxStagedEvents, opt.chunk_events); }
  // The thread table's entries, ascending by thread index (48 bytes each,
  // where a map took about 96: a program that runs threads by the
  // hundred thousand keeps one for every thread).
  std::vector<std::pair<uint32_t, ThreadInfo>> infos;
  void set_info(uint32_t thread, ThreadInfo&& info) {
    // (Threads come in ascending order from a normaliser, which numbers them
    // as they start: an append, or a replace found by binary search. An
    // insert in the middle moves the entries after it.)
    if (infos.empty() || infos.back().first < thread) {
      infos.emplace_back(thread, std::move(info));
      return;
    }
    const auto it =
        std::lower_bound(infos.begin(), infos.end(), thread, [](const auto& e, uint32_t t) { return e.first < t; });
    if (it != infos.end() && it->first == thread)
      it->second = std::move(info);
    else
      infos.emplace(it, thread, std::move(info));
  }
  std::map<int, uint64_t> level_events;  // events in the chunks written at each level
  std::vector<IndexEntry> index;
  std::string final_meta;
  bool has_final_meta = false;
  std::vector<MemoryEvent> memory;
  std::string_view memory_block;  // a MEMX payload to copy (copy_memory_block)
  uint64_t memory_count = 0;      // set_memory_source
  std::function<bool(MemoryEvent&)> memory_next;
  std::vector<uint64_t> addresses;
  // count_heap_peak: each live object's requested bytes, by id, and their
  // sum (modulo 2^128: sizes near 2^64 cannot overflow it).
  // (Objects live behind the ring go to a SplitFlatMap: an mtrace import
  // of 5 M objects live at once peaked at 325 MiB with it, 572 MiB with a
  // FlatMap, scripts/bench-import-live.py; BENCHMARKS.md.)
  std::unique_ptr<IdMap<uint64_t, SplitFlatMap<uint64_t>>> live;
  __extension__ unsigned __int128 live_bytes = 0;
  uint64_t live_peak = 0, objects_peak = 0;
  // Each event's part of the count waits a few events, its object's entry
  // fetched meanwhile: with millions of objects live the table is far
  // larger than the caches, and a free's lookup missed them at every call
  // (`scripts/bench-import-live.py`). The steps are applied in order, so
  // the counts are the same; heap_live_peak() and live_objects_peak()
  // apply the ones still waiting.
  struct HeapStep {
    uint64_t old, id, bytes;  // the object freed (0: none), made (0: none), its requested bytes
  };
  LookAhead<HeapStep> heap_steps;
  [[gnu::always_inline]] void count_heap(const Event& e, uint8_t fields) {
    // (A failed realloc keeps its object; one not live is a trace's own
    // inconsistency, which plan building reports.)
    const uint64_t old = (fields & kConsumes) && !(e.flags & kFailed) ? e.old : 0;
    if (old == 0 && e.id == 0) return;
    const HeapStep s{old, e.id, e.id != 0 ? e.requested_bytes() : 0};
    const bool far = heap_steps.far(*live);
    if (!far && heap_steps.waiting() == 0) [[likely]] {
      apply_heap(s);
      return;
    }
    if (far && old != 0) live->prefetch(old);
    heap_steps.push(
        s, [this](const HeapStep& w) { apply_heap(w); }, far);
  }
  [[gnu::always_inline]] void apply_heap(const HeapStep& s) {
    uint64_t b = 0;
    if (s.old != 0 && live->erase(s.old, &b)) live_bytes -= b;
    if (s.id != 0) {
      live->put(s.id, s.bytes);
      objects_peak = std::max<uint64_t>(objects_peak, live->size());
      live_bytes += s.bytes;
      live_peak = std::max(live_peak, live_bytes > UINT64_MAX ? UINT64_MAX : uint64_t(live_bytes));
    }
  }
  void drain_heap() {
    heap_steps.drain([this](const HeapStep& s) { apply_heap(s); });
  }
  ZSTD_CCtx* cctx = nullptr;
  std::vector<uint8_t> raw;
  std::string block;
  std::string zbuf;

  void check_level(int level) const {
    if (opt.codec == kCodecZstd && (level < 1 || level > ZSTD_maxCLevel()))
      throw TraceError(path + ": zstd level must be between 1 and " + std::to_string(ZSTD_maxCLevel()));
    if (opt.codec == kCodecLz4 && (level < 1 || level > 65537))
      throw TraceError(path + ": lz4 acceleration must be between 1 and 65537");
  }

  [[noreturn]] void io_fail(const char* what) { throw TraceError(path + ": " + what + ": " + std::strerror(errno)); }

  void write_all(const void* data, size_t len) {
    const char* p = static_cast<const char*>(data);
    while (len > 0) {
      ssize_t w = ::write(fd, p, len);
      if (w < 0) {
        if (errno == EINTR) continue;
        io_fail("write failed");
      }
      p += w;
      len -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
  }

  void write_block(uint32_t type, std::string_view payload) {
    if (payload.size() > kMaxBlockPayload)
      throw TraceError(path + ": a block of " + std::to_string(payload.size()) +
                       " bytes exceeds the format's limit of 1 GiB");
    std::string hdr;
    put_u32(hdr, type);
    put_u32(hdr, static_cast<uint32_t>(payload.size()));
    put_u64(hdr, block_checksum(type, payload.data(), payload.size()));
    write_all(hdr.data(), hdr.size());
    write_all(payload.data(), payload.size());
  }

  // A MEMX block of `count` records from `next`, encoded as they come: its
  // header is written once the payload is (the checksum's seed holds the
  // payload's length, so the payload is read back for it, from the page
  // cache).
  void write_memory_stream(uint64_t count, const std::function<bool(MemoryEvent&)>& next) {
    const uint64_t at = offset;
    // Until the payload is whole, the header says a block of the largest
    // size: a reader that finds the file cut here (the writer killed
    // midway) takes it for a trace cut short, and reads the chunks before.
    std::string placeholder;
    put_u32(placeholder, kBlockMemory);
    put_u32(placeholder, static_cast<uint32_t>(kMaxBlockPayload));
    put_u64(placeholder, 0);
    write_all(placeholder.data(), placeholder.size());
    try {
      stream_memory_payload(at, count, next);
    } catch (...) {
      // (The file ends where the block began, as if it had never started.)
      if (::ftruncate(fd, off_t(at)) == 0) offset = at;
      throw;
    }
  }
  void stream_memory_payload(uint64_t at, uint64_t count, const std::function<bool(MemoryEvent&)>& next) {
    struct Out {
      Impl* m;
      uint64_t len;
    } out{this, 0};
    MemoryBlockEncoder enc(
        count,
        [](void* ctx, const char* d, size_t n) {
          auto* o = static_cast<Out*>(ctx);
          o->len += n;
          if (o->len > kMaxBlockPayload)
            throw TraceError(o->m->path + ": the memory block exceeds the format's limit of 1 GiB");
          o->m->write_all(d, n);
        },
        &out);
    MemoryEvent e;
    for (uint64_t i = 0; i < count; ++i) {
      if (!next(e)) throw TraceError(path + ": the memory records ended before their count");
      enc.add(e);
    }
    enc.finish();
    uint64_t sum = 0;
    if (!block_checksum_of_file(kBlockMemory, fd, at + kBlockHeaderSize, out.len, sum)) io_fail("read back failed");
    std::string hdr;
    put_u32(hdr, kBlockMemory);
    put_u32(hdr, static_cast<uint32_t>(out.len));
    put_u64(hdr, sum);
    if (::pwrite(fd, hdr.data(), hdr.size(), off_t(at)) != ssize_t(hdr.size())) io_fail("write failed");
  }

  ThreadEncoder* encoder_slot(uint32_t t) {
    const uint32_t p = t >> kPageBits;
    if (p >= pages.size() || !pages[p]) return nullptr;
    return (*pages[p])[t & ((1u << kPageBits) - 1)].get();
  }

  [[gnu::noinline]] ThreadEncoder& new_encoder(uint32_t t) {
    // About 640 bytes a thread that has events (its encoder, index and
    // info): from 65,536 threads on, each doubling is held against the
    // memory available first (a few MB of input naming a new thread an
    // event would otherwise take the writer to 10 GB at 2^24 threads).
    const uint64_t n = encoders_made++;  // (not active.size(): ended threads leave it, and the
                                         // file still holds their index entries and thread rows)
    if (const auto s = doubling_short_of_memory(n, uint64_t{1} << 16, kWriterBytesPerThread))
      throw TraceError(path + ": " + std::to_string(n) + " threads so far; twice that needs about " +
                       std::to_string(s->need >> 20) + " MiB to write (" + std::to_string(kWriterBytesPerThread) +
                       " bytes a thread), more than the " + std::to_string(s->available >> 20) +
                       " MiB this machine has available");
    const uint32_t p = t >> kPageBits;
    if (p >= pages.size()) pages.resize(p + 1);
    if (!pages[p]) pages[p] = std::make_unique<Page>();
    auto& slot = (*pages[p])[t & ((1u << kPageBits) - 1)];
    slot = std::make_unique<ThreadEncoder>();
    slot->active_pos = uint32_t(active.size());
    active.push_back(t);
    return *slot;
  }

  void flush_thread(uint32_t t) {
    ThreadEncoder& te = *encoder_slot(t);
    if (te.n == 0) return;
    te.last_seq = te.seq_next - 1;
    te.last_time = te.time_prev;
    unsigned width[kColumnCount];
    size_t raw_size = te.n;
    for (unsigned k = 0; k < kColumnCount; ++k) {
      width[k] = width_of(te.max[k]);
      raw_size += size_t{te.n} * width[k];
    }
    // Pack: each value as its low `width` bytes, little-endian, written with
    // an 8-byte store (the buffer keeps 8 bytes of slack).
    raw.resize(raw_size + 8);
    std::memcpy(raw.data(), te.ops.data(), te.n);
    uint8_t* out = raw.data() + te.n;
    for (unsigned k = 0; k < kColumnCount; ++k) out = pack_width(width[k], out, te.colp[k], te.n);

    block.clear();
    put_u32(block, t);
    put_u32(block, te.n);
    put_u64(block, te.first_seq);
    put_u64(block, te.last_seq);
    put_u64(block, te.first_time);
    put_u64(block, te.last_time);
    put_u64(block, te.id_start);
    put_u64(block, te.ref_start);
    put_u8(block, opt.codec);
    put_u8(block, opt.timestamps ? uint8_t{kChunkHasTime} : uint8_t{0});
    put_u16(block, 0);
    put_u32(block, static_cast<uint32_t>(raw_size));
    for (unsigned k = 0; k < kColumnCount; ++k) put_u8(block, static_cast<uint8_t>(width[k]));
    block.append(kChunkHeaderSize - block.size(), '\0');  // reserved, zero
    switch (opt.codec) {
      case kCodecZstd: {
        zbuf.resize(ZSTD_compressBound(raw_size));
        size_t z = ZSTD_compressCCtx(cctx, zbuf.data(), zbuf.size(), raw.data(), raw_size, opt.level);
        if (ZSTD_isError(z)) throw TraceError(path + ": zstd: " + ZSTD_getErrorName(z));
        block.append(zbuf.data(), z);
        break;
      }
      case kCodecLz4: {
        zbuf.resize(static_cast<size_t>(LZ4_compressBound(static_cast<int>(raw_size))));
        int z = LZ4_compress_fast(reinterpret_cast<const char*>(raw.data()), zbuf.data(), static_cast<int>(raw_size),
                                  static_cast<int>(zbuf.size()), opt.level);
        if (z <= 0) throw TraceError(path + ": lz4 compression failed");
        block.append(zbuf.data(), static_cast<size_t>(z));
        break;
      }
      default:
        block.append(reinterpret_cast<const char*>(raw.data()), raw_size);
        break;
    }
    index.push_back({offset, t, te.n, te.first_seq, te.last_seq, te.first_time, te.last_time});
    level_events[opt.level] += te.n;
    write_block(kBlockChunk, block);

    staged_events -= te.n;
    for (auto& m : te.max) m = 0;
    te.n = 0;
  }

  // Gives thread encoder te's staging arrays back (it grows them again
  // from 16 events when it next has any).
  void release_arrays(ThreadEncoder& te) {
    staged_capacity -= te.cap;
    te.cap = 0;
    te.rare = false;
    std::vector<uint8_t>().swap(te.ops);
    for (unsigned k = 0; k < kColumnCount; ++k) {
      std::vector<uint64_t>().swap(te.col[k]);
      te.colp[k] = nullptr;
    }
  }

  // Many threads with few events each: their staging arrays, not their
  // events, pass twice the budget. Every open chunk is written and every
  // array given back (a scan of the threads once per budget's worth of
  // arrays, not once per event).
  [[gnu::noinline]] void flush_all() {
    for (uint32_t t : active) {
      ThreadEncoder& te = *encoder_slot(t);
      flush_thread(t);
      if (te.cap != 0) release_arrays(te);
    }
  }

  // A thread that ended (its thread_end appended): its open chunk is
  // written and its encoder freed, so that a program that starts threads
  // over and over costs the writer nothing for those gone (but their
  // chunks' index entries and thread table rows, which the file holds).
  // Another event of the thread later gets a fresh encoder: every chunk
  // carries its predictors' start.
  void retire(uint32_t t) {
    ThreadEncoder* te = encoder_slot(t);
    if (!te) return;
    flush_thread(t);
    if (te->cap != 0) release_arrays(*te);
    const uint32_t pos = te->active_pos, last = active.back();
    active[pos] = last;
    encoder_slot(last)->active_pos = pos;
    active.pop_back();
    (*pages[t >> kPageBits])[t & ((1u << kPageBits) - 1)].reset();
    if (cached_thread == t) {
      cached_thread = UINT32_MAX;
      cached_encoder = nullptr;
    }
  }

  // The staged events are over the budget: the threads with the most are
  // written early, until a quarter of the budget is free (a scan of the
  // threads for every quarter budget's worth of events, not for every
  // chunk: with many threads of a few events each, a scan a chunk made the
  // writer's time grow with the square of the threads). Staging arrays stay
  // allocated for the next chunk (a busy thread keeps its own); past the
  // budget, the flushed threads' and idle threads' arrays go back, so the
  // writer's memory is about the budget however many threads there are,
  // not a full chunk's arrays a thread.
  void flush_largest() {
    by_staged.clear();
    for (uint32_t t : active)
      if (const uint32_t n = encoder_slot(t)->n; n != 0) by_staged.emplace_back(n, t);
    std::sort(by_staged.begin(), by_staged.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    const size_t target = max_staged() / 4 * 3;
    for (const auto& [n, t] : by_staged) {
      if (staged_events <= target) break;
      flush_thread(t);
    }
    if (staged_capacity > max_staged())
      for (uint32_t t : active)
        if (ThreadEncoder& te = *encoder_slot(t); te.n == 0 && te.cap != 0) release_arrays(te);
  }
  std::vector<std::pair<uint32_t, uint32_t>> by_staged;  // flush_largest's (staged events, thread)

  // The align and count columns, zero up to the events staged so far.
  [[gnu::noinline]] static void add_rare_columns(ThreadEncoder& te) {
    te.rare = true;
    for (const unsigned k : {kColAlign, kColCount}) {
      te.col[k].assign(te.cap, 0);
      te.colp[k] = te.col[k].data();
    }
  }

  void encode(ThreadEncoder& te, const Event& e, uint8_t fields) {
    if (te.n == 0) {
      te.first_seq = te.seq_next = e.seq;
      te.first_time = te.time_prev = e.time;
      te.id_start = te.id_next;
      te.ref_start = te.ref;
    }
    if (te.n == te.cap) [[unlikely]] {
      staged_capacity -= te.cap;
      te.cap = std::min<uint32_t>(opt.chunk_events, std::max<uint32_t>(16, te.cap * 2));
      staged_capacity += te.cap;
      te.ops.resize(te.cap);
      for (unsigned k = 0; k < kColumnCount; ++k) {
        if (!te.rare && (k == kColAlign || k == kColCount)) continue;
        te.col[k].resize(te.cap);
        te.colp[k] = te.col[k].data();
      }
    }
    uint64_t v_old = 0;
    if (fields & kConsumes) {
      v_old = zigzag(static_cast<int64_t>(te.ref - e.old));
      te.ref = e.old;
    }
    uint64_t v_id = 0;
    if ((fields & kProduces) && e.id != 0) {
      v_id = e.id - te.id_next;
      te.id_next = e.id + 1;
      te.ref = e.id;
    }
    const uint64_t v_seq = e.seq - te.seq_next;
    const uint64_t v_time = zigzag(static_cast<int64_t>(e.time - te.time_prev));
    te.seq_next = e.seq + 1;
    te.time_prev = e.time;
    // The width only needs the highest set bit of each column: OR the values.
    te.max[kColSeq] |= v_seq;
    te.max[kColTime] |= v_time;
    te.max[kColOld] |= v_old;
    te.max[kColId] |= v_id;
    te.max[kColSize] |= e.size;
    te.max[kColAlign] |= e.align;
    te.max[kColCount] |= e.count;
    // Stores through the staging pointers last: they could alias the above.
    const uint32_t i = te.n;
    uint64_t* const ps = te.colp[kColSeq];
    uint64_t* const pt = te.colp[kColTime];
    uint64_t* const po = te.colp[kColOld];
    uint64_t* const pi = te.colp[kColId];
    uint64_t* const pz = te.colp[kColSize];
    const uint64_t size = e.size, align = e.align, count = e.count;
    if (!te.rare && (align | count) != 0) [[unlikely]]
      add_rare_columns(te);
    uint64_t* const pa = te.colp[kColAlign];  // (null: neither column yet)
    uint64_t* const pc = te.colp[kColCount];
    te.ops[i] = static_cast<uint8_t>(static_cast<uint8_t>(e.op) | (e.flags << 6));
    ps[i] = v_seq;
    pt[i] = v_time;
    po[i] = v_old;
    pi[i] = v_id;
    pz[i] = size;
    if (pa) {
      pa[i] = align;
      pc[i] = count;
    }
    ++te.n;
    ++staged_events;
  }
};

TraceWriter::TraceWriter(const std::string& path, WriterOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.opt = std::move(options);
  if (m.opt.chunk_events == 0 || m.opt.chunk_events > (1u << 20))
    throw TraceError(path + ": chunk size must be between 1 and 1048576 events");
  if (m.opt.codec != kCodecNone && m.opt.codec != kCodecZstd && m.opt.codec != kCodecLz4)
    throw TraceError(path + ": unknown codec " + std::to_string(m.opt.codec));
  m.check_level(m.opt.level);
  if (m.opt.count_heap_peak) m.live = std::make_unique<IdMap<uint64_t, SplitFlatMap<uint64_t>>>();
  // (Read and write: a memory block written as it is made is read back for its checksum.)
  m.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (m.fd < 0) m.io_fail("cannot create");
  if (m.opt.codec == kCodecZstd) {
    m.cctx = ZSTD_createCCtx();
    if (!m.cctx) throw TraceError(path + ": cannot create a zstd context");
  }
  const std::string hdr = file_header(kFormatMinorPlain, m.opt.timestamps);
  m.write_all(hdr.data(), hdr.size());
  m.write_block(kBlockMeta, m.opt.metadata_json);
}

TraceWriter::~TraceWriter() {
  // A writer destroyed without close() leaves the file as a truncated trace
  // (readable up to its last chunk): no footer is claimed for it.
  if (impl_->fd >= 0) ::close(impl_->fd);
  ZSTD_freeCCtx(impl_->cctx);
}

uint64_t TraceWriter::append(Event& e) {
  Impl& m = *impl_;
  if (m.closed) throw TraceError(m.path + ": append after close");
  const unsigned op = static_cast<unsigned>(e.op);
  if (!op_valid(op))
    throw TraceError(m.path + ": event " + std::to_string(m.next_seq) + ": invalid op code " + std::to_string(op));
  if (e.thread >= kMaxThreads)
    throw TraceError(m.path + ": event " + std::to_string(m.next_seq) + ": thread index " + std::to_string(e.thread) +
                     " exceeds the limit of 2^24 threads");
  const uint8_t fields = kOpInfo[op].fields;
  if (fields & kConsumes) {
    if (e.old > m.last_id)
      throw TraceError(m.path + ": event " + std::to_string(m.next_seq) + ": " + std::string(op_name(e.op)) +
                       " of object " + std::to_string(e.old) + ", which does not exist yet (last id " +
                       std::to_string(m.last_id) + ")");
  } else {
    e.old = 0;
  }
  if (fields & kProduces) {
    if (e.flags & kFailed) e.flags |= kNullResult;
    e.flags &= kNullResult | kFailed;
    e.id = (e.flags & kNullResult) ? 0 : ++m.last_id;
  } else {
    e.flags = 0;
    e.id = 0;
  }
  if (!(fields & kSize)) e.size = 0;
  if (!(fields & kAlign)) e.align = 0;
  if (!(fields & kCount)) e.count = 0;
  if (!m.opt.timestamps) e.time = 0;
  e.seq = m.next_seq++;
  if (m.live) [[unlikely]]
    m.count_heap(e, fields);

  if (e.thread != m.cached_thread) [[unlikely]] {
    ThreadEncoder* slot = m.encoder_slot(e.thread);
    m.cached_encoder = slot ? slot : &m.new_encoder(e.thread);
    m.cached_thread = e.thread;
  }
  ThreadEncoder& te = *m.cached_encoder;
  m.encode(te, e, fields);
  if (e.op == Op::thread_end) [[unlikely]] {
    m.retire(e.thread);
  } else if (te.n >= m.opt.chunk_events) {
    m.flush_thread(e.thread);
  } else if (m.staged_events > m.max_staged()) [[unlikely]] {
    m.flush_largest();
  } else if (m.staged_capacity > 2 * m.max_staged()) [[unlikely]] {
    m.flush_all();
  }
  return e.id;
}

void TraceWriter::set_thread_info(uint32_t thread, ThreadInfo info) {
  Impl& m = *impl_;
  if (thread >= kMaxThreads) throw TraceError(m.path + ": thread index out of range");
  m.set_info(thread, std::move(info));
}

void TraceWriter::set_memory_events(std::vector<MemoryEvent> events) {
  impl_->memory = std::move(events);
  impl_->memory_block = {};
  impl_->memory_count = 0;
}

void TraceWriter::copy_memory_block(std::string_view payload) {
  impl_->memory.clear();
  impl_->memory_count = 0;
  impl_->memory_block = payload;
}

void TraceWriter::set_memory_source(uint64_t count, std::function<bool(MemoryEvent&)> next) {
  impl_->memory.clear();
  impl_->memory_block = {};
  impl_->memory_count = count;
  impl_->memory_next = std::move(next);
}

void TraceWriter::set_addresses(std::vector<uint64_t> by_seq) { impl_->addresses = std::move(by_seq); }

void TraceWriter::set_final_metadata(std::string json) {
  impl_->final_meta = std::move(json);
  impl_->has_final_meta = true;
}

void TraceWriter::set_level(int level) {
  impl_->check_level(level);
  impl_->opt.level = level;
}

void TraceWriter::check_level(int level) const { impl_->check_level(level); }

uint64_t TraceWriter::events_at_level(int level) const {
  const auto it = impl_->level_events.find(level);
  return it == impl_->level_events.end() ? 0 : it->second;
}

void TraceWriter::flush() {
  Impl& m = *impl_;
  std::vector<uint32_t> order = m.active;
  std::sort(order.begin(), order.end());
  for (uint32_t t : order) m.flush_thread(t);
}

void TraceWriter::close() {
  Impl& m = *impl_;
  if (m.closed) return;
  flush();
  std::string payload;
  uint16_t minor = kFormatMinorPlain;
  if (!m.memory.empty()) {
    if (m.memory.size() > (uint64_t{1} << 32))
      throw TraceError(m.path + ": more than 2^32 memory records for one block");
    m.write_block(kBlockMemory, encode_memory_events(m.memory));
    minor = kFormatMinorMemory;
  } else if (!m.memory_block.empty()) {
    m.write_block(kBlockMemory, m.memory_block);
    minor = kFormatMinorMemory;
  } else if (m.memory_count != 0) {
    if (m.memory_count > (uint64_t{1} << 32))
      throw TraceError(m.path + ": more than 2^32 memory records for one block");
    m.write_memory_stream(m.memory_count, m.memory_next);
    minor = kFormatMinorMemory;
  }
  // The addresses of the events written, in blocks of up to 2^20 events
  // (none for a stretch without any).
  const uint64_t addressed = std::min<uint64_t>(m.addresses.size(), m.next_seq);
  for (uint64_t first = 0; first < addressed; first += kAddressBlockEvents) {
    const auto count = uint32_t(std::min<uint64_t>(kAddressBlockEvents, addressed - first));
    const uint64_t* a = m.addresses.data() + first;
    if (std::all_of(a, a + count, [](uint64_t v) { return v == 0; })) continue;
    m.write_block(kBlockAddresses, encode_address_block(first, a, count));
    minor = kFormatMinorAddresses;
  }
  if (minor != kFormatMinorPlain) {
    // The header now says 1.1 or 1.2.
    const std::string hdr = file_header(minor, m.opt.timestamps);
    if (::pwrite(m.fd, hdr.data(), hdr.size(), 0) != ssize_t(hdr.size())) m.io_fail("write failed");
  }
  put_u32(payload, static_cast<uint32_t>(m.infos.size()));
  for (const auto& [thread, ti] : m.infos) {  // ascending thread index
    put_u32(payload, thread);
    put_u64(payload, ti.os_tid);
    put_u32(payload, static_cast<uint32_t>(ti.name.size()));
    payload += ti.name;
  }
  const uint64_t threads_offset = m.offset;
  m.write_block(kBlockThreads, payload);
  uint64_t meta_offset = kFileHeaderSize;
  if (m.has_final_meta) {
    meta_offset = m.offset;
    m.write_block(kBlockMeta, m.final_meta);
  }
  payload.clear();
  put_u64(payload, meta_offset);
  put_u64(payload, threads_offset);
  put_u64(payload, m.index.size());
  for (const IndexEntry& ie : m.index) {
    put_u64(payload, ie.offset);
    put_u32(payload, ie.thread);
    put_u32(payload, ie.events);
    put_u64(payload, ie.first_seq);
    put_u64(payload, ie.last_seq);
    put_u64(payload, ie.first_time);
    put_u64(payload, ie.last_time);
  }
  const uint64_t index_offset = m.offset;
  m.write_block(kBlockIndex, payload);
  std::string footer(kFooterMagic, sizeof kFooterMagic);
  put_u64(footer, index_offset);
  put_u64(footer, m.next_seq);
  put_u64(footer, plain_checksum(footer.data(), footer.size()));
  m.write_all(footer.data(), footer.size());
  m.closed = true;
  if (::close(m.fd) != 0) {
    m.fd = -1;
    m.io_fail("close failed");
  }
  m.fd = -1;
}

uint64_t TraceWriter::events() const { return impl_->next_seq; }
size_t TraceWriter::open_threads() const { return impl_->active.size(); }

uint64_t TraceWriter::objects() const { return impl_->last_id; }
uint64_t TraceWriter::bytes_written() const { return impl_->offset; }
uint64_t TraceWriter::heap_live_peak() const {
  if (impl_->live) impl_->drain_heap();
  return impl_->live_peak;
}
uint64_t TraceWriter::live_objects_peak() const {
  if (impl_->live) impl_->drain_heap();
  return impl_->objects_peak;
}

}  // namespace heaplab::trace
