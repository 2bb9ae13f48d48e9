// A map from non-zero object ids to a trivially copyable value, for tables
// keyed by a trace's object ids (ids count up in order of creation, and most
// objects are freed soon after they are made). The ids within `window` of the
// largest put sit in a ring indexed by the id itself: no hashing, no probing,
// and the entries of the objects made last (the ones most likely freed next)
// are neighbours in memory. An object still live when the window moves past
// its id goes to a FlatMap. Any key works (ids of a damaged trace out of
// order, far apart, wild): a trace whose ids make the window move much more
// than they fill it (each move scans the slots it leaves) gets a FlatMap for
// everything from then on, so no input costs more than a few scans a put.
// FlatMap's interface, with the window's size and counters for tests.
// `Old`: the map for the rest. FlatMap (a load of 1/4 to 1/2) is the
// fastest; SplitFlatMap (up to 3/4; once it holds about 786K entries it
// is 16 tables that each double alone, so only a sixteenth of it is ever
// held twice) takes less memory for millions of objects live behind the
// window (an mtrace import of 5 M live at once: 325 MiB against 572 MiB,
// BENCHMARKS.md), and probes longer. (The window's size and the map's
// are counted here: SplitFlatMap's own size() sums its parts.)
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "capture/format/flat_map.h"

namespace heaplab {

template <typename V, typename Old = FlatMap<V>>
class IdMap {
  static_assert(std::is_trivially_copyable_v<V>);

 public:
  static constexpr size_t kDefaultWindow = size_t{1} << 18;
  // `window`: ids kept in the ring (rounded up to a power of two).
  explicit IdMap(size_t window = kDefaultWindow)
      : ring_(std::bit_ceil(std::max<size_t>(window, 16))), mask_(ring_.size() - 1) {}
  // For a trace of `events` events: a ring no larger than it can fill.
  static IdMap for_events(uint64_t events) { return IdMap(size_t(std::min<uint64_t>(events, kDefaultWindow))); }

  size_t size() const { return in_ring_ + outside_; }

  // Returns the value for key (key != 0), or nullptr.
  V* find(uint64_t key) {
    if (key - base_ <= mask_ && !hashed_) {
      Entry& e = ring_[key & mask_];
      return e.key == key ? &e.value : nullptr;
    }
    return outside_ ? old_.find(key) : nullptr;
  }

  // Brings key's entry into the cache (a lookup soon after is then cheap).
  // A key above the window (an id about to be made) lands in its ring slot.
  void prefetch(uint64_t key) const {
    if (key >= base_ && !hashed_) {
      const Entry* p = ring_.data() + (key & mask_);
#if defined(__SSE__)
      asm volatile("prefetcht0 %0" : : "m"(*p));
#else
      __builtin_prefetch(p);
#endif
    } else if (outside_) {
      old_.prefetch(key);
    }
  }

  // Inserts or overwrites; returns true if the key was new.
  bool put(uint64_t key, const V& value) {
    if (key - base_ > mask_ || hashed_) {
      if (key < base_ || hashed_) return put_old(key, value);
      // (An eighth of the ring at least at a time: ids made in order move it
      // once every ring / 8 puts, not at every one. Never past UINT64_MAX:
      // a window that wrapped would take small keys for its own.)
      advance(std::max(key - mask_, std::min(base_ + (mask_ + 1) / 8, UINT64_MAX - mask_)));
      if (hashed_) return put_old(key, value);
    }
    Entry& e = ring_[key & mask_];
    const bool fresh = e.key != key;
    if (fresh) {
      lo_ = in_ring_ == 0 ? key : std::min(lo_, key);
      ++in_ring_;
      ++puts_;
    }
    e.key = key;
    e.value = value;
    return fresh;
  }

  // Removes key; returns true (and the old value in *out) if it was present.
  bool erase(uint64_t key, V* out = nullptr) {
    if (key - base_ <= mask_ && !hashed_) {
      Entry& e = ring_[key & mask_];
      if (e.key != key) return false;
      if (out) *out = e.value;
      e.key = 0;
      --in_ring_;
      return true;
    }
    if (outside_ == 0 || !old_.erase(key, out)) return false;
    --outside_;
    return true;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (const Entry& e : ring_)
      if (e.key != 0) f(e.key, e.value);
    old_.for_each(f);
  }

  void clear() {
    std::fill(ring_.begin(), ring_.end(), Entry{});
    base_ = 1;
    lo_ = 0;
    in_ring_ = 0;
    puts_ = scanned_ = 0;
    hashed_ = false;
    old_.clear();
    outside_ = 0;
  }

  // For tests and benchmarks: entries outside the ring, slots scanned as
  // the window moved, and whether the ring was given up.
  size_t outside() const { return outside_; }
  uint64_t scanned() const { return scanned_; }
  bool hashed() const { return hashed_; }

 private:
  struct Entry {
    uint64_t key = 0;
    V value{};
  };
  // Moves the window to start at `base`: what is live below it moves out.
  // Slots are scanned from the lowest key put since the ring was last empty
  // (none below it is live) until none live is left or the window's new
  // start: ids made in order scan a slot each, ids far apart one or two.
  void advance(uint64_t base) {
    // Every slot holds an id in [base_, base_ + ring size): when the window
    // moves by the ring's size or more, each one leaves.
    const uint64_t from = std::max(base_, lo_);
    const uint64_t end = base_ + std::min<uint64_t>(base - base_, ring_.size());
    for (uint64_t id = from; id < end && in_ring_ != 0; ++id) {
      ++scanned_;
      Entry& e = ring_[id & mask_];
      if (e.key == 0) continue;
      put_old(e.key, e.value);
      e.key = 0;
      --in_ring_;
    }
    base_ = base;
    lo_ = std::max(lo_, base);
    // Ids that move the window far more than they fill it (a damaged or
    // hostile trace): the ring is given up, all of it hashed from here on.
    if (scanned_ > 4 * puts_ + 4 * ring_.size()) {
      for (Entry& e : ring_)
        if (e.key != 0) put_old(e.key, e.value), e.key = 0;
      in_ring_ = 0;
      hashed_ = true;
    }
  }
  bool put_old(uint64_t key, const V& value) {
    const bool fresh = old_.put(key, value);
    outside_ += fresh;
    return fresh;
  }
  std::vector<Entry, LineAllocator<Entry>> ring_;
  uint64_t mask_;
  uint64_t base_ = 1;  // the ring holds ids in [base_, base_ + mask_]
  uint64_t lo_ = 0;    // no key below it is in the ring
  size_t in_ring_ = 0;
  size_t outside_ = 0;  // entries in old_
  uint64_t puts_ = 0, scanned_ = 0;
  bool hashed_ = false;
  Old old_;
};

}  // namespace heaplab
