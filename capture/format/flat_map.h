// Open-addressing hash map from non-zero uint64 keys to a trivially copyable
// value; linear probing with backward-shift deletion. Much faster and denser
// than std::unordered_map for the id/address tables of importers and analyses.
// The table starts on a cache line: entries of 16 or 32 bytes never span two.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <sys/mman.h>
#include <type_traits>
#include <utility>
#include <vector>

namespace heaplab {

// Memory on a cache line's boundary, for std::vector. A table of 64 KiB or
// more is a mapping of its own; of 2 MiB or more, on a 2 MiB boundary and a
// whole number of 2 MiB long, that asks for huge pages before it is first
// touched (entries looked up at random then miss the TLB less). Being its
// own mapping, it takes nothing from the process's allocator and leaves it
// no memory with that advice (a replayer building its plan in-process,
// beside the allocator under test), and a table that grew past it is given
// back to the system whole (malloc keeps freed blocks below its mapping
// threshold, which it raises to the largest block freed: the SplitFlatMap
// parts' tables that doubled would stay in its arenas).
template <typename T>
struct LineAllocator {
  using value_type = T;
  static constexpr size_t kMapped = size_t{64} << 10, kHuge = size_t{2} << 20, kPage = 4096;
  LineAllocator() = default;
  template <typename U>
  LineAllocator(const LineAllocator<U>&) {}  // NOLINT(google-explicit-constructor): as std::allocator
  static bool mapped(size_t n) { return n * sizeof(T) >= kMapped; }
  static bool huge(size_t n) { return n * sizeof(T) >= kHuge; }
  static size_t mapped_bytes(size_t n) {
    const size_t unit = huge(n) ? kHuge : kPage;
    return (n * sizeof(T) + unit - 1) & ~(unit - 1);
  }
  T* allocate(size_t n) {
    if (!mapped(n)) return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
    const size_t len = mapped_bytes(n);
    if (!huge(n)) {
      void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) throw std::bad_alloc();
      return static_cast<T*>(m);
    }
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

// The hash of a key: FlatMap's slot is its low bits, SplitFlatMap's part
// its top bits.
inline uint64_t flat_hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

template <typename V, size_t PartBytes>
class SplitFlatMap;

// MaxLoadEighths: the table doubles past this load (4: at most 1/2, short
// probe runs; SplitFlatMap's parts take 6).
template <typename V, unsigned MaxLoadEighths = 4>
class FlatMap {
  static_assert(std::is_trivially_copyable_v<V>);
  static_assert(MaxLoadEighths >= 1 && MaxLoadEighths <= 7);

 public:
  FlatMap() { rehash(16); }

  size_t size() const { return size_; }
  // The table's bytes (its entries, used or not).
  size_t table_bytes() const { return table_.size() * sizeof(Entry); }

  // Returns the value for key (key != 0), or nullptr.
  V* find(uint64_t key) { return find(key, flat_hash(key)); }

  // Brings key's first probe slot into the cache (a lookup soon after is then cheap).
  void prefetch(uint64_t key) const { prefetch_hashed(flat_hash(key)); }

  // Inserts or overwrites; returns true if the key was new.
  bool put(uint64_t key, const V& value) {
    const auto [v, fresh] = try_insert(key);
    *v = value;
    return fresh;
  }

  // Finds key (key != 0), or inserts it with a value-initialised value, in
  // one probe: its value and whether it is new. (The pointer stays valid
  // until the map next changes.)
  std::pair<V*, bool> try_insert(uint64_t key) { return try_insert(key, flat_hash(key)); }

  // Removes key; returns true (and the old value in *out) if it was present.
  bool erase(uint64_t key, V* out = nullptr) { return erase(key, flat_hash(key), out); }

  template <typename F>
  void for_each(F&& f) const {
    for (const Entry& e : table_)
      if (e.key != 0) f(e.key, e.value);
  }

  // Empties it, its table given back for a fresh one of 16 entries.
  void clear() { reset(16); }

 private:
  template <typename, size_t>
  friend class SplitFlatMap;
  struct Entry {
    uint64_t key = 0;
    V value{};
  };
  // The operations with the key's hash h (flat_hash(key)) given.
  V* find(uint64_t key, uint64_t h) {
    size_t i = h & mask_;
    for (;;) {
      Entry& e = table_[i];
      if (e.key == key) return &e.value;
      if (e.key == 0) return nullptr;
      i = (i + 1) & mask_;
    }
  }

  // (GCC 12 drops a __builtin_prefetch of an address hashed with a multiply
  // as if it were dead code: written as an instruction of its own.)
  void prefetch_hashed(uint64_t h) const {
    const Entry* p = table_.data() + (h & mask_);
#if defined(__SSE__)
    asm volatile("prefetcht0 %0" : : "m"(*p));
#else
    __builtin_prefetch(p);
#endif
  }

  std::pair<V*, bool> try_insert(uint64_t key, uint64_t h) {
    if (full()) rehash(table_.size() * 2);
    size_t i = h & mask_;
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

  bool erase(uint64_t key, uint64_t h, V* out) {
    size_t i = h & mask_;
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
      const size_t home = flat_hash(e.key) & mask_;
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

  using Table = std::vector<Entry, LineAllocator<Entry>>;
  // Whether the next insertion doubles the table.
  bool full() const { return (size_ + 1) * 8 > table_.size() * MaxLoadEighths; }
  // Empty, with a table of n entries.
  void reset(size_t n) {
    Table().swap(table_);
    table_.assign(n, Entry{});
    mask_ = n - 1;
    size_ = 0;
  }
  // Entry e, whose key is not in the map, with room for it (no growth).
  void place(const Entry& e, uint64_t h) {
    size_t i = h & mask_;
    while (table_[i].key != 0) i = (i + 1) & mask_;
    table_[i] = e;
    ++size_;
  }
  void rehash(size_t n) {
    Table old;
    old.swap(table_);
    reset(n);
    for (const Entry& e : old)
      if (e.key != 0) place(e, flat_hash(e.key));
  }
  Table table_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// A FlatMap in 16 parts chosen by the hash's top bits, each a table at a
// load of at most 3/4 that doubles on its own: a map that grows never holds
// its old and new tables whole at once (a FlatMap's doubling does, for a
// moment three times its entries' room at a load of 1/2 to 1/4), and its
// tables take about 16/0.56 bytes an entry of 8-byte values, where a
// FlatMap's take 16/0.375. For maps of millions of entries whose memory is
// what bounds a tool (the normaliser's live objects); the same interface.
// Until its parts would be 2 MiB each, it is one table (part 0): a part of
// 2 MiB or more gets huge pages, and lookups at random over several tables
// of 4 KiB pages miss the TLB more than over one on a huge page (64 parts
// of 1 MiB took twice as long in id_map_bench; 16 parts of 128 KiB cost
// the live capture of `churn 1` about 5% more CPU). The one split, from a
// table of 16 parts' 1 MiB to 16 of 2 MiB, briefly holds both. (PartBytes:
// the parts' least size, smaller in tests.)
template <typename V, size_t PartBytes = size_t{2} << 20>
class SplitFlatMap {
 public:
  // (Summed over the parts: no count kept per insert and erase.)
  size_t size() const {
    size_t n = 0;
    for (const Part& p : parts_) n += p.size();
    return n;
  }
  size_t table_bytes() const {
    size_t n = 0;
    for (const Part& p : parts_) n += p.table_bytes();
    return n;
  }
  // The most bytes one part's table takes (a part that doubles briefly
  // adds twice that).
  size_t largest_part_bytes() const {
    size_t n = 0;
    for (const Part& p : parts_) n = std::max(n, p.table_bytes());
    return n;
  }
  // Whether it is in parts yet.
  bool split() const { return split_; }
  // The part a key goes in once split (for tests).
  static size_t part_of(uint64_t key) { return index(flat_hash(key)); }
  V* find(uint64_t key) {
    const uint64_t h = flat_hash(key);
    return part(h).find(key, h);
  }
  void prefetch(uint64_t key) const {
    const uint64_t h = flat_hash(key);
    parts_[split_ ? index(h) : 0].prefetch_hashed(h);
  }
  bool put(uint64_t key, const V& value) {
    const auto [v, fresh] = try_insert(key);
    *v = value;
    return fresh;
  }
  std::pair<V*, bool> try_insert(uint64_t key) {
    if (!split_ && parts_[0].full() && parts_[0].table_bytes() * 2 >= kParts * kPartBytes) [[unlikely]]
      split_whole();
    const uint64_t h = flat_hash(key);
    return part(h).try_insert(key, h);
  }
  bool erase(uint64_t key, V* out = nullptr) {
    const uint64_t h = flat_hash(key);
    return part(h).erase(key, h, out);
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Part& p : parts_) p.for_each(f);
  }
  void clear() {
    for (Part& p : parts_) p.clear();
    split_ = false;
  }

 private:
  static constexpr unsigned kPartBits = 4;
  static constexpr size_t kParts = size_t{1} << kPartBits, kPartBytes = PartBytes;
  using Part = FlatMap<V, 6>;
  static size_t index(uint64_t h) { return (h * 0x9e3779b97f4a7c15ULL) >> (64 - kPartBits); }
  Part& part(uint64_t h) { return parts_[split_ ? index(h) : 0]; }
  // The one table (part 0), full, into kParts tables with the room it would
  // have doubled to.
  [[gnu::noinline]] void split_whole() {
    typename Part::Table whole;
    whole.swap(parts_[0].table_);
    const size_t n = std::max<size_t>(16, whole.size() * 2 / kParts);
    for (Part& p : parts_) p.reset(n);
    for (const auto& e : whole)
      if (e.key != 0) {
        const uint64_t h = flat_hash(e.key);
        Part& p = parts_[index(h)];
        // (Keys that crowd into one part, as a crafted trace's addresses
        // can, double it as they come: place() never grows a table.)
        if (p.full()) p.rehash(p.table_.size() * 2);
        p.place(e, h);
      }
    split_ = true;
  }
  std::array<Part, kParts> parts_;
  bool split_ = false;
};

}  // namespace heaplab
