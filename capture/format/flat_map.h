// Open-addressing hash map from non-zero uint64 keys to a trivially copyable
// value; linear probing with backward-shift deletion. Much faster and denser
// than std::unordered_map for the id/address tables of importers and analyses.
// The table starts on a cache line: entries of 16 or 32 bytes never span two.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <new>
#include <sys/mman.h>
#include <type_traits>
#include <utility>
#include <vector>

namespace heaplab {

// Memory on a cache line's boundary, for std::vector. A table of 2 MiB or
// more is a mapping of its own, on a 2 MiB boundary and a whole number of
// 2 MiB long, that asks for huge pages before it is first touched (entries
// looked up at random then miss the TLB less). Being its own mapping, it
// takes nothing from the process's allocator and leaves it no memory with
// that advice (a replayer building its plan in-process, beside the
// allocator under test).
template <typename T>
struct LineAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20;
  LineAllocator() = default;
  template <typename U>
  LineAllocator(const LineAllocator<U>&) {}  // NOLINT(google-explicit-constructor): as std::allocator
  static bool mapped(size_t n) { return n * sizeof(T) >= kHuge; }
  static size_t mapped_bytes(size_t n) { return (n * sizeof(T) + kHuge - 1) & ~(kHuge - 1); }
  T* allocate(size_t n) {
    if (!mapped(n)) return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
    const size_t len = mapped_bytes(n);
    void* m = mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    // The 2 MiB-aligned part of len bytes is kept, the rest given back.
    const uintptr_t at = reinterpret_cast<uintptr_t>(m);
    const uintptr_t start = (at + kHuge - 1) & ~(kHuge - 1);
    if (start > at) munmap(m, start - at);
    munmap(reinterpret_cast<void*>(start + len), at + kHuge - start);  // (at least a page: at is page-aligned)
#if defined(MADV_HUGEPAGE)
    (void)madvise(reinterpret_cast<void*>(start), len, MADV_HUGEPAGE);
#endif
    return reinterpret_cast<T*>(start);
  }
  void deallocate(T* p, size_t n) {
    if (mapped(n))
      munmap(p, mapped_bytes(n));
    else
      ::operator delete (p, std::align_val_t{64});
  }
  template <typename U>
  bool operator==(const LineAllocator<U>&) const {
    return true;
  }
};

template <typename V>
class FlatMap {
  static_assert(std::is_trivially_copyable_v<V>);

 public:
  FlatMap() { rehash(16); }

  size_t size() const { return size_; }

  // Returns the value for key (key != 0), or nullptr.
  V* find(uint64_t key) {
    size_t i = slot(key);
    for (;;) {
      Entry& e = table_[i];
      if (e.key == key) return &e.value;
      if (e.key == 0) return nullptr;
      i = (i + 1) & mask_;
    }
  }

  // Brings key's first probe slot into the cache (a lookup soon after is then cheap).
  // (GCC 12 drops a __builtin_prefetch of an address hashed with a multiply
  // as if it were dead code: written as an instruction of its own.)
  void prefetch(uint64_t key) const {
    const Entry* p = table_.data() + slot(key);
#if defined(__SSE__)
    asm volatile("prefetcht0 %0" : : "m"(*p));
#else
    __builtin_prefetch(p);
#endif
  }

  // Inserts or overwrites; returns true if the key was new.
  bool put(uint64_t key, const V& value) {
    if ((size_ + 1) * 2 > table_.size()) rehash(table_.size() * 2);  // load <= 1/2: short probe runs
    size_t i = slot(key);
    for (;;) {
      Entry& e = table_[i];
      if (e.key == key) {
        e.value = value;
        return false;
      }
      if (e.key == 0) {
        e.key = key;
        e.value = value;
        ++size_;
        return true;
      }
      i = (i + 1) & mask_;
    }
  }

  // Finds key (key != 0), or inserts it with a value-initialised value, in
  // one probe: its value and whether it is new. (The pointer stays valid
  // until the map next changes.)
  std::pair<V*, bool> try_insert(uint64_t key) {
    if ((size_ + 1) * 2 > table_.size()) rehash(table_.size() * 2);
    size_t i = slot(key);
    for (;;) {
      Entry& e = table_[i];
      if (e.key == key) return {&e.value, false};
      if (e.key == 0) {
        e.key = key;
        e.value = V{};
        ++size_;
        return {&e.value, true};
      }
      i = (i + 1) & mask_;
    }
  }

  // Removes key; returns true (and the old value in *out) if it was present.
  bool erase(uint64_t key, V* out = nullptr) {
    size_t i = slot(key);
    for (;;) {
      Entry& e = table_[i];
      if (e.key == 0) return false;
      if (e.key == key) break;
      i = (i + 1) & mask_;
    }
    if (out) *out = table_[i].value;
    // Backward-shift: move later entries of the probe run into the hole.
    size_t hole = i;
    size_t j = i;
    for (;;) {
      j = (j + 1) & mask_;
      Entry& e = table_[j];
      if (e.key == 0) break;
      const size_t home = slot(e.key);
      // e may move into the hole if its home is not cyclically in (hole, j].
      if (((j - home) & mask_) >= ((j - hole) & mask_)) {
        table_[hole] = e;
        hole = j;
      }
    }
    table_[hole].key = 0;
    --size_;
    return true;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (const Entry& e : table_)
      if (e.key != 0) f(e.key, e.value);
  }

  void clear() {
    table_.assign(16, Entry{});
    mask_ = 15;
    size_ = 0;
  }

 private:
  struct Entry {
    uint64_t key = 0;
    V value{};
  };
  size_t slot(uint64_t k) const {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k) & mask_;
  }
  void rehash(size_t n) {
    std::vector<Entry, LineAllocator<Entry>> old;
    old.swap(table_);
    table_.assign(n, Entry{});
    mask_ = n - 1;
    size_ = 0;
    for (const Entry& e : old)
      if (e.key != 0) put(e.key, e.value);
  }
  std::vector<Entry, LineAllocator<Entry>> table_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace heaplab
