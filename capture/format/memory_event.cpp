#include "capture/format/memory_event.h"

#include <algorithm>

#include "capture/format/bytes.h"
#include "capture/format/zstd_frame.h"

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

std::string encode_memory_events(const std::vector<MemoryEvent>& events) {
  std::string raw;
  raw.reserve(events.size() * kMemoryRecordSize);
  for (const MemoryEvent& e : events) {
    put_u32(raw, uint32_t(e.op));
    put_u32(raw, e.thread);
    for (uint64_t v : {e.after, e.time, e.region, e.offset, e.length, e.pages, e.new_region, e.new_length})
      put_u64(raw, v);
  }
  std::string out;
  put_u32(out, 1);
  put_u32(out, uint32_t(kMemoryRecordSize));
  put_u64(out, events.size());
  put_u64(out, raw.size());
  append_zstd_frame(out, raw);
  return out;
}

std::optional<std::vector<MemoryEvent>> decode_memory_events(std::string_view payload, std::string& error) {
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  if (payload.size() < 24) {
    error = "memory block too short";
    return std::nullopt;
  }
  const uint32_t version = load_u32(p), rec = load_u32(p + 4);
  const uint64_t count = load_u64(p + 8), raw_size = load_u64(p + 16);
  if (version != 1 || rec != kMemoryRecordSize) return std::vector<MemoryEvent>{};  // a later layout: not read here
  if (count > (uint64_t{1} << 32) || raw_size != count * kMemoryRecordSize) {
    error = "memory block sizes do not match its record count";
    return std::nullopt;
  }
  // What the frame says it holds must be what the header says, and no more
  // than a zstd frame of this size can hold: a damaged or hostile header
  // never makes the reader allocate what the file cannot contain.
  std::string raw;
  if (raw_size > (payload.size() - 24) * 4096 + (1u << 20) || !read_zstd_frame(payload.substr(24), raw_size, raw)) {
    error = "memory block does not decompress to its size (corrupt data)";
    return std::nullopt;
  }
  std::vector<MemoryEvent> out;
  out.reserve(count);
  const auto* r = reinterpret_cast<const uint8_t*>(raw.data());
  for (uint64_t i = 0; i < count; ++i, r += kMemoryRecordSize) {
    const uint32_t op = load_u32(r);
    if (op == 0 || op > kMemOpMax) continue;  // a later minor's record: not for this reader
    MemoryEvent& e = out.emplace_back();
    e.op = MemOp(op);
    e.thread = load_u32(r + 4);
    uint64_t* f[] = {&e.after, &e.time, &e.region, &e.offset, &e.length, &e.pages, &e.new_region, &e.new_length};
    for (int k = 0; k < 8; ++k) *f[k] = load_u64(r + 8 + 8 * k);
  }
  return out;
}

uint64_t& MappedBytes::length(uint64_t region) {
  if (region >= length_.size()) length_.resize(region + 1, 0);
  return length_[region];
}

void MappedBytes::apply(const MemoryEvent& e) {
  switch (e.op) {
    case MemOp::map:
      length(e.region) += e.length;
      now_ += e.length;
      break;
    case MemOp::unmap:
    case MemOp::remap: {
      uint64_t& len = length(e.region);
      const uint64_t gone = std::min(len, e.length);
      len -= gone;
      now_ -= gone;
      if (e.op == MemOp::remap) {
        length(e.new_region) += e.new_length;
        now_ += e.new_length;
      }
      break;
    }
    default:
      return;
  }
  peak_ = std::max(peak_, now());
}

std::string check_memory_events(const std::vector<MemoryEvent>& events) {
  std::vector<uint64_t> length(1, 0);  // by region id (0 unused)
  uint64_t last_after = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& e = events[i];
    const std::string at = "memory record " + std::to_string(i) + " (" + std::string(mem_op_name(e.op)) + "): ";
    if (e.thread >= (1u << 24)) return at + "thread beyond the limit of 2^24";
    if (e.op == MemOp::object) {
      if (e.region == 0) return at + "object 0";
      continue;
    }
    if (e.op == MemOp::latency) continue;
    if (e.after < last_after) return at + "out of order (after " + std::to_string(e.after) + ")";
    last_after = e.after;
    if (e.op == MemOp::map) {
      if (e.region != length.size()) return at + "region " + std::to_string(e.region) + " is not the next one";
      length.push_back(e.length);
      continue;
    }
    if (e.region == 0 || e.region >= length.size())
      return at + "region " + std::to_string(e.region) + " was never mapped";
    if (e.offset > length[e.region] || e.length > length[e.region] - e.offset)
      return at + "offset " + std::to_string(e.offset) + " + " + std::to_string(e.length) +
             " bytes lies outside region " + std::to_string(e.region) + " (" + std::to_string(length[e.region]) +
             " bytes)";
    if (e.op == MemOp::remap) {
      if (e.new_region != length.size())
        return at + "new region " + std::to_string(e.new_region) + " is not the next one";
      length.push_back(e.new_length);
    }
  }
  return "";
}

}  // namespace heaplab::trace
