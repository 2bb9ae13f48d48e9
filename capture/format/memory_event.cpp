#include "capture/format/memory_event.h"

#include <zstd.h>

#include <algorithm>
#include <optional>
#include <memory>
#include <new>
#include <stdexcept>

#include "capture/format/bytes.h"
#include "capture/format/memory_available.h"

namespace heaplab::trace {

using namespace bytes;

std::string_view mem_op_name(MemOp op) {
  switch (op) {
    case MemOp::map:
      return "mmap";
    case MemOp::unmap:
      return "munmap";
    case MemOp::remap:
      return "mremap";
    case MemOp::dontneed:
      return "madvise_dontneed";
    case MemOp::lazy_free:
      return "madvise_free";
    case MemOp::touch:
      return "touch";
    case MemOp::object:
      return "object_resident";
    case MemOp::latency:
      return "latency";
  }
  return "?";
}

struct MemoryBlockEncoder::Zstd {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ~Zstd() { ZSTD_freeCCtx(c); }
};

namespace {
constexpr size_t kEncodeBatch = 1024;
}  // namespace

MemoryBlockEncoder::MemoryBlockEncoder(uint64_t count, Sink sink, void* ctx)
    : z_(std::make_unique<Zstd>()), sink_(sink), ctx_(ctx), count_(count) {
  if (!z_->c) throw std::bad_alloc();
  std::string h;
  put_u32(h, 1);
  put_u32(h, uint32_t(kMemoryRecordSize));
  put_u64(h, count);
  put_u64(h, count * kMemoryRecordSize);
  sink_(ctx_, h.data(), h.size());
  // One frame that declares its size, compressed a batch at a time: the raw
  // records are never all laid out at once.
  ZSTD_CCtx_setParameter(z_->c, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(z_->c, ZSTD_c_contentSizeFlag, 1);
  ZSTD_CCtx_setPledgedSrcSize(z_->c, count * kMemoryRecordSize);
  raw_.reserve(kEncodeBatch * kMemoryRecordSize);
  out_.resize(ZSTD_CStreamOutSize());
}

MemoryBlockEncoder::~MemoryBlockEncoder() = default;

void MemoryBlockEncoder::add(const MemoryEvent& e) {
  if (added_ == count_) throw std::logic_error("memory block: more records than its count");
  ++added_;
  put_u32(raw_, uint32_t(e.op));
  put_u32(raw_, e.thread);
  for (uint64_t v : {e.after, e.time, e.region, e.offset, e.length, e.pages, e.new_region, e.new_length})
    put_u64(raw_, v);
  if (raw_.size() == kEncodeBatch * kMemoryRecordSize) compress(false);
}

void MemoryBlockEncoder::compress(bool last) {
  ZSTD_inBuffer in{raw_.data(), raw_.size(), 0};
  for (size_t left = 1; left != 0 || in.pos < in.size;) {
    ZSTD_outBuffer o{out_.data(), out_.size(), 0};
    left = ZSTD_compressStream2(z_->c, &o, &in, last ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(left)) throw std::runtime_error(std::string("memory block: zstd: ") + ZSTD_getErrorName(left));
    if (o.pos) sink_(ctx_, out_.data(), o.pos);
    if (!last && in.pos == in.size) break;
  }
  raw_.clear();
}

void MemoryBlockEncoder::finish() {
  if (added_ != count_) throw std::logic_error("memory block: fewer records than its count");
  compress(true);
}

std::string encode_memory_events(const std::vector<MemoryEvent>& events) {
  std::string out;
  MemoryBlockEncoder enc(
      events.size(), [](void* ctx, const char* d, size_t n) { static_cast<std::string*>(ctx)->append(d, n); }, &out);
  for (const MemoryEvent& e : events) enc.add(e);
  enc.finish();
  return out;
}

namespace {
constexpr const char* kCorrupt = "memory block does not decompress to its size (corrupt data)";
constexpr size_t kBatchRecords = 1024;
}  // namespace

struct MemoryRecordStream::Zstd {
  ZSTD_DStream* ds = ZSTD_createDStream();
  ~Zstd() { ZSTD_freeDStream(ds); }
};

MemoryRecordStream::MemoryRecordStream(std::string_view payload) {
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  if (payload.size() < 24) {
    fail("memory block too short");
    return;
  }
  const uint32_t version = load_u32(p), rec = load_u32(p + 4);
  const uint64_t count = load_u64(p + 8), raw_size = load_u64(p + 16);
  if (version != 1 || rec != kMemoryRecordSize) {  // a later layout: not read here
    ended_ = true;
    return;
  }
  if (count > (uint64_t{1} << 32) || raw_size != count * kMemoryRecordSize) {
    fail("memory block sizes do not match its record count");
    return;
  }
  // What the frame says it holds must be what the header says, and no more
  // than a zstd frame of this size can hold.
  frame_ = payload.substr(24);
  if (raw_size > frame_.size() * 4096 + (1u << 20) ||
      ZSTD_getFrameContentSize(frame_.data(), frame_.size()) != raw_size) {
    fail(kCorrupt);
    return;
  }
  declared_ = count;
  raw_left_ = raw_size;
  z_ = new Zstd;
  // (A hostile frame header could ask for a window of up to 128 MiB a
  // stream, zstd's own limit.)
  if (!z_->ds || ZSTD_isError(ZSTD_initDStream(z_->ds)) ||
      ZSTD_isError(ZSTD_DCtx_setParameter(z_->ds, ZSTD_d_windowLogMax, 24)))
    fail("memory block: cannot start zstd");
}

MemoryRecordStream::~MemoryRecordStream() { delete z_; }

void MemoryRecordStream::fail(const char* what) {
  error_ = what;
  ended_ = true;
}

bool MemoryRecordStream::fill() {
  if (ended_) return false;
  if (raw_.empty()) raw_.resize(kBatchRecords * kMemoryRecordSize);
  const size_t want = size_t(std::min<uint64_t>(raw_left_, raw_.size()));
  ZSTD_outBuffer out{raw_.data(), want, 0};
  ZSTD_inBuffer in{frame_.data(), frame_.size(), in_pos_};
  bool frame_done = false;
  while (out.pos < out.size) {
    const size_t before_in = in.pos, before_out = out.pos;
    const size_t ret = ZSTD_decompressStream(z_->ds, &out, &in);
    if (ZSTD_isError(ret)) {
      fail(kCorrupt);
      return false;
    }
    if (ret == 0) {
      frame_done = true;
      break;
    }
    if (in.pos == before_in && out.pos == before_out) {  // the frame is cut short
      fail(kCorrupt);
      return false;
    }
  }
  in_pos_ = in.pos;
  raw_left_ -= out.pos;
  raw_pos_ = 0;
  raw_len_ = out.pos;
  if (raw_left_ == 0 && !frame_done) {
    // Everything declared is out: the frame must end here, and the block with it.
    char spare = 0;
    ZSTD_outBuffer none{&spare, 0, 0};
    const size_t ret = ZSTD_decompressStream(z_->ds, &none, &in);
    in_pos_ = in.pos;
    frame_done = ret == 0;
    if (!frame_done) {
      fail(kCorrupt);
      return false;
    }
  }
  if (frame_done && (raw_left_ != 0 || in_pos_ != frame_.size() || raw_len_ % kMemoryRecordSize != 0)) {
    fail(kCorrupt);
    return false;
  }
  if (frame_done) ended_ = true;
  return raw_len_ != 0;
}

size_t MemoryRecordStream::next(MemoryEvent* out, size_t max) {
  size_t n = 0;
  while (n < max) {
    if (raw_pos_ == raw_len_) {
      const bool had_error = !error_.empty();
      if (had_error || !fill()) break;
      if (!error_.empty()) break;
    }
    const auto* r = reinterpret_cast<const uint8_t*>(raw_.data()) + raw_pos_;
    raw_pos_ += kMemoryRecordSize;
    const uint32_t op = load_u32(r);
    if (op == 0 || op > kMemOpMax) continue;  // a later minor's record: not for this reader
    MemoryEvent& e = out[n++];
    e.op = MemOp(op);
    e.thread = load_u32(r + 4);
    uint64_t* f[] = {&e.after, &e.time, &e.region, &e.offset, &e.length, &e.pages, &e.new_region, &e.new_length};
    for (int k = 0; k < 8; ++k) *f[k] = load_u64(r + 8 + 8 * k);
  }
  return error_.empty() ? n : 0;
}

std::optional<std::vector<MemoryEvent>> decode_memory_events(std::string_view payload, std::string& error) {
  MemoryRecordStream in(payload);
  std::vector<MemoryEvent> out;
  out.reserve(size_t(in.declared()));
  MemoryEvent batch[256];
  while (size_t n = in.next(batch, 256)) out.insert(out.end(), batch, batch + n);
  if (!in.error().empty()) {
    error = in.error();
    return std::nullopt;
  }
  return out;
}

void MappedBytes::apply(const MemoryEvent& e) {
  switch (e.op) {
    case MemOp::map:
      length_[e.region] += e.length;
      now_ += e.length;
      break;
    case MemOp::unmap:
    case MemOp::remap: {
      uint64_t gone = 0;
      if (auto it = length_.find(e.region); it != length_.end()) {
        gone = std::min(it->second, e.length);
        it->second -= gone;
        if (it->second == 0) length_.erase(it);  // (wholly unmapped)
      }
      now_ -= gone;
      if (e.op == MemOp::remap && e.new_length != 0) {
        length_[e.new_region] += e.new_length;
        now_ += e.new_length;
      }
      break;
    }
    default:
      return;
  }
  peak_ = std::max(peak_, now());
}

std::string MemoryChecker::check(const MemoryEvent& e) {
  const uint64_t i = index_++;
  const auto at = [&] { return "memory record " + std::to_string(i) + " (" + std::string(mem_op_name(e.op)) + "): "; };
  if (e.thread >= (1u << 24)) return at() + "thread beyond the limit of 2^24";
  if (e.op == MemOp::object) {
    // Last, by ascending object id: a replay finds each object's count as
    // the object is made, reading them once, in order.
    if (e.region == 0) return at() + "object 0";
    if (objects_ && e.region <= last_object_)
      return at() + "object " + std::to_string(e.region) + " out of order (after object " +
             std::to_string(last_object_) + ")";
    objects_ = true;
    last_object_ = e.region;
    return "";
  }
  if (objects_) return at() + "after the objects' resident counts";
  if (e.after < last_after_) return at() + "out of order (after " + std::to_string(e.after) + ")";
  last_after_ = e.after;
  if (e.op == MemOp::latency) return "";
  if (e.op == MemOp::map) {
    if (e.region != next_region_) return at() + "region " + std::to_string(e.region) + " is not the next one";
    if (std::string bad = new_region(e.length); !bad.empty()) return at() + bad;
    return "";
  }
  if (e.region == 0 || e.region >= next_region_)
    return at() + "region " + std::to_string(e.region) + " was never mapped";
  const auto it = regions_.find(e.region);
  if (it == regions_.end()) return at() + "region " + std::to_string(e.region) + " is no longer mapped";
  Region& g = it->second;
  if (e.offset > g.extent || e.length > g.extent - e.offset)
    return at() + "offset " + std::to_string(e.offset) + " + " + std::to_string(e.length) +
           " bytes lies outside region " + std::to_string(e.region) + " (" + std::to_string(g.extent) + " bytes)";
  if (e.op == MemOp::unmap || e.op == MemOp::remap) {
    g.left -= std::min(g.left, e.length);
    if (g.left == 0) regions_.erase(it);  // (wholly unmapped: nothing may name it again)
  }
  if (e.op == MemOp::remap) {
    if (e.new_region != next_region_)
      return at() + "new region " + std::to_string(e.new_region) + " is not the next one";
    if (std::string bad = new_region(e.new_length); !bad.empty()) return at() + bad;
  }
  return "";
}

// Regions are dense and never reused: whoever reads the records follows
// each one while any of it is mapped (this table, a replay plan's hash
// table and mapped bytes: about 100 bytes in all), so their count is held
// against the memory available as it doubles, from 2^20 at once on.
std::string MemoryChecker::new_region(uint64_t length) {
  constexpr uint64_t kBytesPerRegion = 100;
  // (Only at a new high: a count that goes to and fro across a power of two
  // is checked once.)
  const uint64_t n = regions_.size() + 1;
  const auto s = n > regions_high_ ? doubling_short_of_memory(n, uint64_t{1} << 20, kBytesPerRegion) : std::nullopt;
  regions_high_ = std::max(regions_high_, n);
  if (s)
    return std::to_string(n - 1) + " regions mapped at once so far; twice that needs about " +
           std::to_string(s->need >> 20) + " MiB to follow, more than the " + std::to_string(s->available >> 20) +
           " MiB this machine has available";
  regions_.emplace(next_region_++, Region{length, length});
  return "";
}

std::string check_memory_events(const std::vector<MemoryEvent>& events) {
  MemoryChecker c;
  for (const MemoryEvent& e : events)
    if (std::string bad = c.check(e); !bad.empty()) return bad;
  return "";
}

}  // namespace heaplab::trace
