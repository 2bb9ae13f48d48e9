#include "capture/normalise/memory_map.h"

#include <algorithm>
#include <bit>
#include <optional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>

#include "capture/format/memory_available.h"

namespace heaplab::normalise {

using trace::MemOp;
using trace::MemoryEvent;

MemoryMap::Anchor MemoryMap::push(const MemoryEvent& e, uint64_t order) {
  // Object records have no place in the order: they go last, by object id.
  const uint64_t major = e.op == MemOp::object ? (uint64_t{1} << 63) | e.region : e.after;
  sorter_.push(major, order, e);
  return Anchor{e.after, e.time, order, e.thread};
}

uint64_t MemoryMap::add_region(const Anchor& a) {
  // From 2^20 regions mapped at once on, each doubling is held against the
  // memory available first. (A region wholly unmapped is dropped: a
  // program that maps and unmaps in a loop holds one at a time.)
  // (Only at a new high: a count that goes to and fro across a power of
  // two is checked once.)
  const uint64_t n = regions_.size() + 1;
  const auto s = n > regions_high_ ? trace::doubling_short_of_memory(n, kCheckedFrom, kBytesPerRegion) : std::nullopt;
  regions_high_ = std::max(regions_high_, n);
  if (s)
    throw std::runtime_error("the program's own memory calls (mmap, munmap, ...): " + std::to_string(n - 1) +
                             " mappings at once so far; twice that needs about " + std::to_string(s->need >> 20) +
                             " MiB to follow (" + std::to_string(kBytesPerRegion) +
                             " bytes a mapping), more than the " + std::to_string(s->available >> 20) +
                             " MiB this machine has available");
  const uint64_t id = next_region_++;
  regions_.emplace(id, Region{a, 0});
  return id;
}

void MemoryMap::put_piece(uint64_t start, const Piece& p) {
  pieces_[start] = p;
  ++regions_.at(p.region).pieces;
}

// A call made at `at`.
MemoryEvent MemoryMap::call(MemOp op, const MemoryPosition& at, uint64_t region, uint64_t offset, uint64_t len,
                            uint64_t pages) {
  MemoryEvent e;
  e.op = op;
  e.after = at.after;
  e.thread = at.thread;
  e.time = at.time;
  e.region = region;
  e.offset = offset;
  e.length = len;
  e.pages = pages;
  return e;
}

// An event in its own place in the order (not placed behind another).
MemoryMap::Anchor MemoryMap::push(const MemoryEvent& e) { return push(e, sorter_.size() << 1); }

uint64_t MemoryMap::new_region(const MemoryPosition& at, uint64_t addr, uint64_t len) {
  const uint64_t id = add_region(push(call(MemOp::map, at, next_region_, 0, len, 0)));
  put_piece(addr, Piece{addr + len, id, addr});
  mapped_ += len;
  ++counts_.regions;
  return id;
}

template <typename Fn>
void MemoryMap::overlapping(uint64_t lo, uint64_t hi, Fn fn) {
  auto it = pieces_.upper_bound(lo);
  if (it != pieces_.begin()) --it;
  for (; it != pieces_.end() && it->first < hi; ++it) {
    if (it->second.end <= lo) continue;
    fn(it->first, it->second, std::max(lo, it->first), std::min(hi, it->second.end));
  }
}

void MemoryMap::cut(uint64_t lo, uint64_t hi) {
  std::vector<std::pair<uint64_t, Piece>> add;
  std::vector<uint64_t> left;  // regions that lost a piece
  auto it = pieces_.upper_bound(lo);
  if (it != pieces_.begin()) --it;
  while (it != pieces_.end() && it->first < hi) {
    const uint64_t start = it->first;
    const Piece p = it->second;
    if (p.end <= lo) {
      ++it;
      continue;
    }
    it = pieces_.erase(it);
    --regions_.at(p.region).pieces;
    left.push_back(p.region);
    mapped_ -= std::min(p.end, hi) - std::max(start, lo);
    if (start < lo) add.emplace_back(start, Piece{lo, p.region, p.base});
    if (p.end > hi) add.emplace_back(hi, Piece{p.end, p.region, p.base});
  }
  for (auto& [s, p] : add) put_piece(s, p);
  // A region with nothing left mapped is done with: nothing can be placed
  // behind its calls any more.
  for (uint64_t r : left)
    if (auto g = regions_.find(r); g != regions_.end() && g->second.pieces == 0) regions_.erase(g);
}

// A call's resident count is for its whole range, which may span several
// mappings: each piece gets as many as it can hold, in address order, from
// what is left (`pages` counts down).
uint64_t MemoryMap::share_of(uint64_t& pages, uint64_t lo, uint64_t hi) {
  if (pages == trace::kUnknownPages) return pages;
  const uint64_t fits = (hi - lo + 4095) / 4096;
  const uint64_t n = std::min(pages, fits);
  pages -= n;
  return n;
}

// The pages were resident from the region's previous event on: the touch
// goes right behind it (same place in the order, same thread and time).
void MemoryMap::touch(uint64_t region, uint64_t offset, uint64_t len, uint64_t pages) {
  if (pages == 0 || pages == trace::kUnknownPages) return;
  ++counts_.measured;
  const Anchor a = regions_.at(region).last;
  MemoryEvent e;
  e.op = MemOp::touch;
  e.after = a.after;
  e.thread = a.thread;
  e.time = a.time;
  e.region = region;
  e.offset = offset;
  e.length = len;
  e.pages = pages;
  push(e, a.order + 1);
}

void MemoryMap::map(const MemoryPosition& at, uint64_t addr, uint64_t len, bool fixed, uint64_t pages) {
  ++counts_.calls;
  if (len == 0) return;
  if (fixed) {  // whatever was mapped there is replaced (not a call of its own)
    unmap(at, addr, len, pages);
    --counts_.calls;
  }
  new_region(at, addr, len);
}

// munmap and madvise: one event per mapping piece the range touches, each
// behind a touch of the pages it had resident.
void MemoryMap::release(const MemoryPosition& at, uint64_t addr, uint64_t len, uint64_t pages, MemOp op) {
  ++counts_.calls;
  bool any = false;
  std::vector<MemoryEvent> out;
  overlapping(addr, addr + len, [&](uint64_t, const Piece& p, uint64_t lo, uint64_t hi) {
    any = true;
    const uint64_t share = share_of(pages, lo, hi);
    touch(p.region, lo - p.base, hi - lo, share);
    out.push_back(call(op, at, p.region, lo - p.base, hi - lo, share));
  });
  if (!any) ++counts_.unknown_releases;
  for (MemoryEvent& e : out) regions_.at(e.region).last = push(e);
  if (op == MemOp::unmap) cut(addr, addr + len);
}

void MemoryMap::unmap(const MemoryPosition& at, uint64_t addr, uint64_t len, uint64_t pages) {
  release(at, addr, len, pages, MemOp::unmap);
}

void MemoryMap::remap(const MemoryPosition& at, uint64_t old, uint64_t old_len, uint64_t pages, uint64_t result,
                      uint64_t new_len, unsigned flags) {
  constexpr unsigned kFixed = 2, kDontUnmap = 4;  // MREMAP_FIXED, MREMAP_DONTUNMAP
  if (flags & kDontUnmap) {
    // The pages move to a new mapping; the old one stays, empty.
    auto it = pieces_.upper_bound(old);
    if (it == pieces_.begin() || std::prev(it)->second.end <= old) {  // not the program's mapping
      ++counts_.calls;
      ++counts_.unknown_releases;
      return;
    }
    map(at, result, new_len, flags & kFixed);
    --counts_.calls;
    if (const auto f = pieces_.find(result); f != pieces_.end()) touch(f->second.region, 0, new_len, pages);
    advise(at, old, old_len, false, pages);
    return;
  }
  ++counts_.calls;
  auto it = pieces_.upper_bound(old);
  if (it == pieces_.begin() || std::prev(it)->second.end <= old) {
    ++counts_.unknown_releases;
    return;
  }
  const Piece p = std::prev(it)->second;
  const uint64_t len = std::min(old_len, p.end - old);
  touch(p.region, old - p.base, len, pages);
  cut(old, old + len);
  MemoryEvent e = call(MemOp::remap, at, p.region, old - p.base, len, pages);
  e.new_region = next_region_;
  e.new_length = new_len;
  const Anchor a = push(e);
  // (The old region may be gone: the remap took all it had left.)
  if (auto g = regions_.find(p.region); g != regions_.end()) g->second.last = a;
  // The new region: its own id, mapped by the remap itself (no map event),
  // over whatever was there (MREMAP_FIXED unmaps its target).
  add_region(a);
  // MREMAP_FIXED unmapped whatever was at its target first: said as an unmap.
  if (flags & kFixed) {
    release(at, result, new_len, trace::kUnknownPages, MemOp::unmap);
    --counts_.calls;
  }
  cut(result, result + new_len);
  put_piece(result, Piece{result + new_len, e.new_region, result});
  mapped_ += new_len;
  ++counts_.regions;
}

void MemoryMap::advise(const MemoryPosition& at, uint64_t addr, uint64_t len, bool lazy, uint64_t pages) {
  release(at, addr, len, pages, lazy ? MemOp::lazy_free : MemOp::dontneed);
}

void MemoryMap::brk(const MemoryPosition& at, uint64_t old, uint64_t now, uint64_t pages) {
  if (now > old) {
    map(at, old, now - old, false);
  } else if (now < old) {
    unmap(at, now, old - now, pages);
  }
}

bool MemoryMap::resident(uint64_t addr, uint64_t len, uint64_t pages) {
  bool any = false;
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> found;
  overlapping(addr, addr + len, [&](uint64_t, const Piece& p, uint64_t lo, uint64_t hi) {
    any = true;
    found.emplace_back(p.region, lo - p.base, hi - lo);
  });
  for (auto& [region, off, n] : found) touch(region, off, n, share_of(pages, off, off + n));
  return any;
}

void MemoryMap::object(uint64_t id, uint64_t len, uint64_t pages) {
  if (pages == trace::kUnknownPages) return;
  ++counts_.measured;
  MemoryEvent e;
  e.op = MemOp::object;
  e.region = id;
  e.length = len;
  e.pages = pages;
  push(e, 0);
}

unsigned MemoryMap::latency_level(uint64_t seq) {
  // splitmix64's finaliser: the seqs of a run of calls spread evenly.
  uint64_t z = seq + 0x9e3779b97f4a7c15;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return unsigned(std::countl_zero(z ^ (z >> 31)));
}

void MemoryMap::latency(uint64_t seq, uint32_t thread, uint64_t ns) {
  const unsigned level = latency_level(seq);
  if (level < latency_level_) {
    ++counts_.latencies_dropped;
    return;
  }
  MemoryEvent e;
  e.op = MemOp::latency;
  e.after = seq;
  e.thread = thread;
  e.length = ns;
  push(e);
  ++latencies_at_level_[level];
  ++counts_.latencies;
  // Past the limit, the lowest level kept goes: its calls held are dropped
  // when read back.
  while (counts_.latencies > max_latencies_ && latency_level_ < 64) {
    const uint64_t n = latencies_at_level_[latency_level_++];
    counts_.latencies -= n;
    counts_.latencies_dropped += n;
    latencies_thinned_ += n;
  }
}

bool MemoryMap::next(MemoryEvent& e) {
  while (sorter_.next(e))
    if (latencies_thinned_ == 0 || e.op != MemOp::latency || latency_level(e.after) >= latency_level_) return true;
  return false;
}

}  // namespace heaplab::normalise
