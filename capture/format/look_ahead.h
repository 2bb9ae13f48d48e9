// A few items read ahead of the one processed: a reader that looks each
// item up in a table far larger than the caches (an importer's address
// table, a writer's live objects, with millions of objects live) reads an
// item, starts fetching its table entries, and processes it kAhead items
// later, when they have arrived. Items are processed in the order pushed.
// kLookAheadFrom: the entries from which a table is taken to be larger than
// the caches (for 16-byte entries at a load of 1/2 to 3/4, about 1-2 MiB).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace heaplab {

inline constexpr size_t kLookAheadFrom = 65536;

template <typename T, size_t kAhead = 16>
class LookAhead {
 public:
  // Queues `item`; once kAhead wait, processes the oldest first (take(T&)).
  // With `ahead` false (a table small enough for the caches, where fetching
  // ahead gains nothing and queueing costs a copy), processes the items
  // still waiting and then `item` at once.
  template <typename F>
  void push(const T& item, F&& take, bool ahead = true) {
    if (!ahead) [[likely]] {
      if (waiting_ != 0) drain(take);
      T now = item;
      take(now);
      return;
    }
    if (waiting_ < kAhead) {
      ++waiting_;
      items_[next_] = item;
      next_ = (next_ + 1) % kAhead;
      return;
    }
    // (The oldest leaves the ring before it is taken: one whose take
    // throws is not taken again.)
    T oldest = items_[next_];
    items_[next_] = item;
    next_ = (next_ + 1) % kAhead;
    take(oldest);
  }
  // push(), with the entries of `key` and `other` (where non-zero and not
  // `key`) in `table` fetched first where it is far() from the caches:
  // the importers' calls, each with its address and the one it came from.
  template <typename Table, typename F>
  void push_fetching(const T& item, F&& take, const Table& table, uint64_t key, uint64_t other) {
    const bool ahead = far(table);
    if (ahead) {
      table.prefetch(key);
      if (other != 0 && other != key) table.prefetch(other);
    }
    push(item, take, ahead);
  }
  // Processes every item still waiting, oldest first.
  template <typename F>
  void drain(F&& take) {
    while (waiting_ > 0) {
      T& item = items_[(next_ + kAhead - waiting_) % kAhead];
      --waiting_;  // (first: an item whose take throws is not taken again)
      take(item);
    }
  }
  size_t waiting() const { return waiting_; }
  // Whether `table` (anything with size()) is past kLookAheadFrom entries:
  // looked at once every 1,024 calls (a size() may sum parts).
  template <typename Table>
  bool far(const Table& table) {
    if ((calls_++ & 1023) == 0) far_ = table.size() >= kLookAheadFrom;
    return far_;
  }

 private:
  std::array<T, kAhead> items_{};
  size_t next_ = 0, waiting_ = 0;
  uint64_t calls_ = 0;
  bool far_ = false;
};

}  // namespace heaplab
