// A map from non-zero object ids to a trivially copyable value, for tables
// keyed by a trace's object ids (ids count up in order of creation, and most
// objects are freed soon after they are made). The ids of the last `window`
// made sit in a ring indexed by the id itself: no hashing, no probing, and the
// entries of the objects made last (the ones most likely freed next) are
// neighbours in memory. An object still live when the window moves past its
// id goes to a FlatMap. Any key works (ids of a damaged trace out of order, a
// wild id): only the speed differs. Same interface as FlatMap.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "capture/format/flat_map.h"

namespace heaplab {

template <typename V>
class IdMap {
  static_assert(std::is_trivially_copyable_v<V>);

 public:
  static constexpr size_t kDefaultWindow = size_t{1} << 18;
  // `window`: ids kept in the ring (rounded up to a power of two).
  explicit IdMap(size_t window = kDefaultWindow)
      : ring_(std::bit_ceil(std::max<size_t>(window, 16))), mask_(ring_.size() - 1) {}

  size_t size() const { return in_ring_ + old_.size(); }

  // Returns the value for key (key != 0), or nullptr.
  V* find(uint64_t key) {
    if (key - base_ <= mask_) {
      Entry& e = ring_[key & mask_];
      return e.key == key ? &e.value : nullptr;
    }
    return old_.size() ? old_.find(key) : nullptr;
  }

  // Brings key's entry into the cache (a lookup soon after is then cheap).
  void prefetch(uint64_t key) const {
    if (key - base_ <= mask_) {
      const Entry* p = ring_.data() + (key & mask_);
#if defined(__SSE__)
      asm volatile("prefetcht0 %0" : : "m"(*p));
#else
      __builtin_prefetch(p);
#endif
    } else if (old_.size()) {
      old_.prefetch(key);
    }
  }

  // Inserts or overwrites; returns true if the key was new.
  bool put(uint64_t key, const V& value) {
    if (key < base_) return old_.put(key, value);
    if (key - base_ > mask_) advance(key - mask_);
    Entry& e = ring_[key & mask_];
    const bool fresh = e.key != key;
    if (fresh) ++in_ring_;
    e.key = key;
    e.value = value;
    return fresh;
  }

  // Removes key; returns true (and the old value in *out) if it was present.
  bool erase(uint64_t key, V* out = nullptr) {
    if (key - base_ <= mask_) {
      Entry& e = ring_[key & mask_];
      if (e.key != key) return false;
      if (out) *out = e.value;
      e.key = 0;
      --in_ring_;
      return true;
    }
    return old_.size() ? old_.erase(key, out) : false;
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
    in_ring_ = 0;
    old_.clear();
  }

  // Entries that left the ring still live (for tests and benchmarks).
  size_t outside() const { return old_.size(); }

 private:
  struct Entry {
    uint64_t key = 0;
    V value{};
  };
  // Moves the window to start at `base`: what is live below it moves out.
  void advance(uint64_t base) {
    // Every slot holds an id in [base_, base_ + ring size): when the window
    // moves by the ring's size or more, each one leaves.
    const uint64_t n = std::min<uint64_t>(base - base_, ring_.size());
    for (uint64_t id = base_; id < base_ + n; ++id) {
      Entry& e = ring_[id & mask_];
      if (e.key == 0) continue;
      old_.put(e.key, e.value);
      e.key = 0;
      --in_ring_;
    }
    base_ = base;
  }
  std::vector<Entry, LineAllocator<Entry>> ring_;
  uint64_t mask_;
  uint64_t base_ = 1;  // the ring holds ids in [base_, base_ + mask_]
  size_t in_ring_ = 0;
  FlatMap<V> old_;
};

}  // namespace heaplab
