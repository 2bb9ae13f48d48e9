// The program's own memory besides malloc (memory.h). libc only.
#include "capture/shim/memory.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/shim/hooks.h"
#include "capture/shim/raw_format.h"
#include "capture/shim/sink.h"

namespace heaplab::shim {

using namespace heaplab::raw;

RealMemory g_mem;
bool g_large_any = false;

namespace {

uint64_t g_page = 4096;

// Text ranges whose calls are not the program's: the shim's, the
// allocator's, and those of the libraries the allocator alone brings in
// (gperftools' tcmalloc maps memory through libunwind).
struct Range {
  uintptr_t lo = 0, hi = 0;
};
constexpr int kMaxRanges = 8;
Range g_ranges[kMaxRanges];

bool not_programs(const void* caller) {
  uintptr_t c = uintptr_t(caller);
  for (const Range& r : g_ranges)
    if (c - r.lo < r.hi - r.lo) return true;
  return false;
}

// Libraries everyone uses: calls from them are never the allocator's.
bool runtime_library(const char* name) {
  static const char* const kRuntime[] = {"libc.so",     "libm.so",  "libpthread.so",
                                         "libdl.so",    "librt.so", "libstdc++.so",
                                         "libgcc_s.so", "ld-linux", "libheaplab_capture"};
  for (const char* r : kRuntime)
    if (strstr(name, r)) return true;
  return false;
}

struct FindRange {
  uintptr_t addr;                  // find the object containing this address,
  const char* needed[kMaxRanges];  // or (second pass) those whose names end in one of these
  int n_needed;
  Range found;
  int n_found;
  Range deps[kMaxRanges];
};

Range load_range(dl_phdr_info* info, uintptr_t addr, bool* contains) {
  uintptr_t lo = ~uintptr_t{0}, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph.p_vaddr, b = a + ph.p_memsz;
    if (a < lo) lo = a;
    if (b > hi) hi = b;
    if (addr - a < ph.p_memsz) *contains = true;
  }
  return Range{lo, hi};
}

// The DT_NEEDED names of the object that contains f->addr.
void note_needed(dl_phdr_info* info, FindRange* f) {
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn) return;
  uintptr_t strtab = 0;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d)
    if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
  if (!strtab) return;
  if (strtab < info->dlpi_addr) strtab += info->dlpi_addr;  // not relocated in place
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL && f->n_needed < kMaxRanges - 2; ++d)
    if (d->d_tag == DT_NEEDED) {
      const char* name = reinterpret_cast<const char*>(strtab + d->d_un.d_val);
      if (!runtime_library(name)) f->needed[f->n_needed++] = name;
    }
}

int find_object(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindRange*>(data);
  bool contains = false;
  Range r = load_range(info, f->addr, &contains);
  if (!contains) return 0;
  f->found = r;
  note_needed(info, f);
  return 1;
}

int find_needed(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindRange*>(data);
  const char* path = info->dlpi_name;
  if (!path || !*path) return 0;
  const char* base = strrchr(path, '/');
  base = base ? base + 1 : path;
  for (int i = 0; i < f->n_needed && f->n_found < kMaxRanges - 2; ++i)
    if (strcmp(base, f->needed[i]) == 0) {
      bool unused = false;
      f->deps[f->n_found++] = load_range(info, 0, &unused);
    }
  return 0;
}

// ---- the table of large heap blocks ----------------------------------------
// Keys are the addresses of large heap blocks (0 empty, 1 deleted). Writers hold g_lock with signals blocked (a handler
// that allocates must not find it held); readers probe without it.
constexpr uint64_t kEmpty = 0, kDeleted = 1;
struct Entry {
  uint64_t key;
  uint64_t bytes;
};
struct Table {
  uint64_t cap;   // power of two
  uint64_t used;  // live + deleted
  uint64_t live;
  Entry e[1];
};
Table* g_table = nullptr;  // atomic pointer
int g_lock = 0;

Table* new_table(uint64_t cap) {
  size_t bytes = sizeof(Table) + cap * sizeof(Entry);
  long r = syscall(SYS_mmap, nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r < 0 && r > -4096) return nullptr;
  auto* t = reinterpret_cast<Table*>(r);
  t->cap = cap;
  return t;
}

uint64_t hash(uint64_t k) { return (k >> 4) * 0x9E3779B97F4A7C15ull; }

// Probe position of `key` in t, or where it would go.
Entry* probe(Table* t, uint64_t key, bool for_insert) {
  uint64_t mask = t->cap - 1;
  Entry* tomb = nullptr;
  for (uint64_t i = hash(key) >> 20 & mask, n = 0; n < t->cap; i = (i + 1) & mask, ++n) {
    Entry* e = &t->e[i];
    uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
    if (k == key) return e;
    if (k == kDeleted && !tomb) tomb = e;
    if (k == kEmpty) return for_insert ? (tomb ? tomb : e) : nullptr;
  }
  return for_insert ? tomb : nullptr;
}

struct Locked {
  sigset_t old;
  Locked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (__atomic_exchange_n(&g_lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
  }
  ~Locked() {
    __atomic_store_n(&g_lock, 0, __ATOMIC_RELEASE);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
};

// A seqlock over the table: odd while a writer changes it. Lock-free
// readers that see it change (or odd) look again under the lock.
uint64_t g_version = 0;

void table_insert(Table* t, uint64_t key, uint64_t bytes) {
  Entry* e = probe(t, key, true);
  if (!e) return;
  const uint64_t was = e->key;
  e->bytes = bytes;
  __atomic_store_n(&e->key, key, __ATOMIC_RELAXED);
  if (was == kEmpty) ++t->used;
  if (was != key) ++t->live;
}

void table_put(uint64_t key, uint64_t bytes) {
  Locked lock;
  __atomic_fetch_add(&g_version, 1, __ATOMIC_ACQ_REL);  // odd: changing
  __atomic_thread_fence(__ATOMIC_RELEASE);              // (before the stores below, on any CPU)
  Table* t = g_table;
  if (!t || (t->used + 1) * 2 > t->cap) {
    // Grow when half full of live entries; else only the deleted ones go
    // (rebuilt in place: a retired table stays mapped, as a reader may be in it).
    uint64_t cap = t ? t->cap : 1024;
    while (t && cap < (t->live + 1) * 4) cap *= 2;
    Table* n = new_table(cap);
    if (n) {
      if (t)
        for (uint64_t i = 0; i < t->cap; ++i)
          if (t->e[i].key > kDeleted) table_insert(n, t->e[i].key, t->e[i].bytes);
      if (t && cap == t->cap) {  // same size: copy back, drop the scratch table
        memcpy(t->e, n->e, cap * sizeof(Entry));
        t->used = n->used;
        t->live = n->live;
        syscall(SYS_munmap, n, sizeof(Table) + cap * sizeof(Entry));
      } else {
        __atomic_store_n(&g_table, n, __ATOMIC_RELEASE);
        t = n;
      }
    }
  }
  if (t && (t->used + 1) < t->cap) {
    table_insert(t, key, bytes);
    __atomic_store_n(&g_large_any, true, __ATOMIC_RELAXED);
  }                                                     // (out of memory: this block goes unmeasured)
  __atomic_fetch_add(&g_version, 1, __ATOMIC_ACQ_REL);  // even: stable
}

// Removes `key`; returns its bytes (0 if absent). Most frees are of small
// blocks: a probe without the lock says so.
uint64_t table_take(uint64_t key) {
  const uint64_t v1 = __atomic_load_n(&g_version, __ATOMIC_ACQUIRE);
  if (!(v1 & 1)) {
    Table* t = __atomic_load_n(&g_table, __ATOMIC_ACQUIRE);
    const bool found = t && probe(t, key, false);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&g_version, __ATOMIC_RELAXED) == v1 && !found) return 0;
  }
  Locked lock;
  Table* t = g_table;
  Entry* e = t ? probe(t, key, false) : nullptr;
  if (!e) return 0;
  __atomic_fetch_add(&g_version, 1, __ATOMIC_ACQ_REL);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  const uint64_t bytes = e->bytes;
  __atomic_store_n(&e->key, kDeleted, __ATOMIC_RELAXED);
  --t->live;
  __atomic_fetch_add(&g_version, 1, __ATOMIC_ACQ_REL);
  return bytes;
}

// ---- the program's mappings, as sorted disjoint intervals ----------------
// (A hash table cannot find the mappings a munmap overlaps; these are few
// next to heap blocks.) Under g_lock, like the table.
struct Interval {
  uint64_t lo, hi;
};
Interval* g_maps = nullptr;
uint64_t g_maps_n = 0, g_maps_cap = 0;

// First interval with hi > addr.
uint64_t maps_find(uint64_t addr) {
  uint64_t a = 0, b = g_maps_n;
  while (a < b) {
    uint64_t m = (a + b) / 2;
    if (g_maps[m].hi <= addr)
      a = m + 1;
    else
      b = m;
  }
  return a;
}

bool maps_reserve(uint64_t n) {
  if (n <= g_maps_cap) return true;
  uint64_t cap = g_maps_cap ? g_maps_cap * 2 : 256;
  while (cap < n) cap *= 2;
  long r =
      syscall(SYS_mmap, nullptr, cap * sizeof(Interval), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r < 0 && r > -4096) return false;
  auto* m = reinterpret_cast<Interval*>(r);
  if (g_maps_n) memcpy(m, g_maps, g_maps_n * sizeof(Interval));
  if (g_maps) syscall(SYS_munmap, g_maps, g_maps_cap * sizeof(Interval));
  g_maps = m;
  g_maps_cap = cap;
  return true;
}

// Removes [lo, hi) from the intervals. Called with g_lock held.
void maps_cut(uint64_t lo, uint64_t hi) {
  uint64_t i = maps_find(lo);
  if (i < g_maps_n && g_maps[i].lo < lo && g_maps[i].hi > hi) {  // a hole in the middle: split
    if (!maps_reserve(g_maps_n + 1)) return;
    memmove(&g_maps[i + 1], &g_maps[i], (g_maps_n - i) * sizeof(Interval));
    ++g_maps_n;
    g_maps[i].hi = lo;
    g_maps[i + 1].lo = hi;
    return;
  }
  if (i < g_maps_n && g_maps[i].lo < lo) g_maps[i++].hi = lo;  // keeps its head
  uint64_t j = i;
  while (j < g_maps_n && g_maps[j].hi <= hi) ++j;            // wholly inside: gone
  if (j < g_maps_n && g_maps[j].lo < hi) g_maps[j].lo = hi;  // keeps its tail
  if (j > i) {
    memmove(&g_maps[i], &g_maps[j], (g_maps_n - j) * sizeof(Interval));
    g_maps_n -= j - i;
  }
}

void maps_add(uint64_t lo, uint64_t hi) {
  Locked lock;
  maps_cut(lo, hi);
  if (!maps_reserve(g_maps_n + 1)) return;
  uint64_t i = maps_find(lo);
  memmove(&g_maps[i + 1], &g_maps[i], (g_maps_n - i) * sizeof(Interval));
  g_maps[i] = Interval{lo, hi};
  ++g_maps_n;
}

void maps_remove(uint64_t lo, uint64_t hi) {
  Locked lock;
  maps_cut(lo, hi);
}

uint64_t count_vec(const unsigned char* v, uint64_t n) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; ++i) c += v[i] & 1u;
  return c;
}

// Resident pages of [p, p+len), rounded out to pages. With `holes`, pages
// that are not mapped count as not resident; without, any makes it unknown.
uint64_t resident_untimed(const void* p, uint64_t len, bool holes);

// mincore is the shim's cost, not the program's: timed and recorded.
uint64_t resident(const void* p, uint64_t len, bool holes) {
  if (len == 0) return 0;
  const uint64_t t0 = stamp();
  const uint64_t n = resident_untimed(p, len, holes);
  note_overhead(t0);
  return n;
}

uint64_t resident_untimed(const void* p, uint64_t len, bool holes) {
  if (len == 0) return 0;
  uintptr_t lo = uintptr_t(p) & ~(g_page - 1);
  uintptr_t hi = (uintptr_t(p) + len + g_page - 1) & ~(g_page - 1);
  constexpr uint64_t kVec = 4096;
  unsigned char vec[kVec];
  uint64_t total = 0;
  for (uintptr_t a = lo; a < hi;) {
    uint64_t pages = (hi - a) / g_page;
    if (pages > kVec) pages = kVec;
    if (mincore(reinterpret_cast<void*>(a), pages * g_page, vec) == 0) {
      total += count_vec(vec, pages);
    } else if (errno == ENOMEM && holes) {
      for (uint64_t i = 0; i < pages; ++i)
        if (mincore(reinterpret_cast<void*>(a + i * g_page), g_page, vec) == 0) total += vec[0] & 1u;
    } else {
      return kUnknownPages;
    }
    a += pages * g_page;
  }
  return total;
}

bool ready() { return __atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == 2; }

// brk(2) as libc's: the system call returns the new break (the old one if it could not move).
int raw_brk(void* addr) {
  if (uintptr_t(syscall(SYS_brk, addr)) >= uintptr_t(addr)) return 0;
  errno = ENOMEM;
  return -1;
}

bool anonymous_private(int flags, int) { return (flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE; }

}  // namespace

uint64_t resident_pages(const void* p, uint64_t len) { return resident(p, len, false); }

void memory_resolve(const void* allocator_malloc) {
  g_mem.mmap = reinterpret_cast<void* (*)(void*, size_t, int, int, int, off_t)>(dlsym(RTLD_NEXT, "mmap"));
  g_mem.munmap = reinterpret_cast<int (*)(void*, size_t)>(dlsym(RTLD_NEXT, "munmap"));
  g_mem.mremap = reinterpret_cast<void* (*)(void*, size_t, size_t, int, ...)>(dlsym(RTLD_NEXT, "mremap"));
  g_mem.madvise = reinterpret_cast<int (*)(void*, size_t, int)>(dlsym(RTLD_NEXT, "madvise"));
  g_mem.brk = reinterpret_cast<int (*)(void*)>(dlsym(RTLD_NEXT, "brk"));
  g_mem.sbrk = reinterpret_cast<void* (*)(intptr_t)>(dlsym(RTLD_NEXT, "sbrk"));
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0) g_page = uint64_t(ps);
  FindRange shim{};
  shim.addr = uintptr_t(&memory_resolve);
  dl_iterate_phdr(find_object, &shim);
  g_ranges[0] = shim.found;
  FindRange alloc{};
  alloc.addr = uintptr_t(allocator_malloc);
  if (allocator_malloc) dl_iterate_phdr(find_object, &alloc);
  g_ranges[1] = alloc.found;
  // Only a library the allocator brings in: libc (glibc's malloc) brings in none.
  if (alloc.n_needed) dl_iterate_phdr(find_needed, &alloc);
  for (int i = 0; i < alloc.n_found; ++i) g_ranges[2 + i] = alloc.deps[i];
}

// Before start-up ends (and so before g_mem is resolved) every call passes
// straight to the kernel, unrecorded.
void* hook_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off, const void* caller) {
  if (!ready() || !g_mem.mmap) {
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    return reinterpret_cast<void*>(r);  // libc's syscall() set errno and returned -1 == MAP_FAILED
  }
  bool record = g_capturing && anonymous_private(flags, fd) && !not_programs(caller);
  uint64_t before = 0;
  if (record && (flags & MAP_FIXED)) {
    before = resident(addr, len, true);
    if (before == kUnknownPages) before = 0;
  }
  void* p = g_mem.mmap(addr, len, prot, flags, fd, off);
  if (record && p != MAP_FAILED) {
    emit(kRawMmap, uint64_t(p), len, uint64_t(uint32_t(flags)) | before << 32);
    maps_add(uint64_t(p), uint64_t(p) + len);
  }
  return p;
}

int hook_munmap(void* addr, size_t len, const void* caller) {
  if (!ready() || !g_mem.munmap) return int(syscall(SYS_munmap, addr, len));
  if (g_capturing && !not_programs(caller)) {
    maps_remove(uint64_t(addr), uint64_t(addr) + len);
    emit(kRawMunmap, uint64_t(addr), len, resident(addr, len, true));
  }
  return g_mem.munmap(addr, len);
}

void* hook_mremap(void* old, size_t old_len, size_t new_len, int flags, void* new_addr, const void* caller) {
  if (!ready() || !g_mem.mremap) {
    long r = syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
    return reinterpret_cast<void*>(r);
  }
  bool record = g_capturing && !not_programs(caller);
  if (record) {
    emit(kRawMremapBegin, uint64_t(old), old_len, resident(old, old_len, true));
  }
  void* p = g_mem.mremap(old, old_len, new_len, flags, new_addr);
  if (record) {
    emit(kRawMremap, p == MAP_FAILED ? 0 : uint64_t(p), new_len, uint64_t(old) | (unsigned(flags) & 0xfff));
    if (p != MAP_FAILED) {
      if (!(flags & MREMAP_DONTUNMAP)) maps_remove(uint64_t(old), uint64_t(old) + old_len);
      maps_add(uint64_t(p), uint64_t(p) + new_len);
    }
  }
  return p;
}

int hook_madvise(void* addr, size_t len, int advice, const void* caller) {
  if (!ready() || !g_mem.madvise) return int(syscall(SYS_madvise, addr, len, advice));
  if ((advice == MADV_DONTNEED || advice == MADV_FREE) && g_capturing && !not_programs(caller)) {
    uint64_t r = resident(addr, len, true);
    emit(kRawMadvise, uint64_t(addr), len, uint64_t(advice) | r << 8);
  }
  return g_mem.madvise(addr, len, advice);
}

int hook_brk(void* addr, const void* caller) {
  if (!ready() || !g_mem.brk || !g_mem.sbrk) return raw_brk(addr);
  if (!g_capturing || not_programs(caller)) return g_mem.brk(addr);
  void* old = g_mem.sbrk(0);
  const uint64_t released = addr < old ? resident(addr, uint64_t(old) - uint64_t(addr), true) : 0;
  int rc = g_mem.brk(addr);
  if (rc == 0 && old != addr) {
    emit(kRawBreak, uint64_t(old), uint64_t(addr), released);
    if (addr > old)
      maps_add(uint64_t(old), uint64_t(addr));
    else
      maps_remove(uint64_t(addr), uint64_t(old));
  }
  return rc;
}

void* hook_sbrk(intptr_t incr, const void* caller) {
  if (!ready() || !g_mem.sbrk) {  // before start-up: the break can be read, not moved
    // (moving it behind libc's back would leave libc's cached break stale)
    if (incr == 0) return reinterpret_cast<void*>(syscall(SYS_brk, 0));
    errno = ENOMEM;
    return reinterpret_cast<void*>(-1);
  }
  const bool record = incr != 0 && g_capturing && !not_programs(caller);
  uint64_t released = 0;
  if (record && incr < 0) {
    char* now = static_cast<char*>(g_mem.sbrk(0));
    released = resident(now + incr, uint64_t(-incr), true);
  }
  void* old = g_mem.sbrk(incr);
  if (record && old != reinterpret_cast<void*>(-1)) {
    const uint64_t now = uint64_t(old) + uint64_t(incr);
    emit(kRawBreak, uint64_t(old), now, released);
    if (incr > 0)
      maps_add(uint64_t(old), now);
    else
      maps_remove(now, uint64_t(old));
  }
  return old;
}

void large_made(const void* p, uint64_t bytes) {
  if (p && bytes >= kResidentMinBytes && g_capturing) table_put(uint64_t(p), bytes);
}

void memory_after_fork() {
  // A thread that held the lock (or was changing the table) is gone: the
  // table may be half rebuilt, but the child's readers must not see it odd forever.
  __atomic_store_n(&g_version, (g_version + 1) & ~uint64_t{1}, __ATOMIC_RELEASE);
  __atomic_store_n(&g_lock, 0, __ATOMIC_RELEASE);
}

void large_released_slow(const void* p) {
  if (!g_capturing) return;
  const uint64_t bytes = table_take(uint64_t(p));
  if (!bytes) return;
  emit(kRawResident, uint64_t(p), resident(p, bytes, false), bytes);
}

void memory_exit_scan() {
  if (!g_capturing) return;
  Locked lock;
  if (Table* t = g_table)
    for (uint64_t i = 0; i < t->cap; ++i) {
      const uint64_t key = t->e[i].key, bytes = t->e[i].bytes;
      if (key > kDeleted) emit(kRawResident, key, resident(reinterpret_cast<void*>(key), bytes, false), bytes);
    }
  constexpr uint64_t kChunk = 1 << 20;  // mappings are measured a MiB at a time
  for (uint64_t m = 0; m < g_maps_n; ++m) {
    const Interval iv = g_maps[m];
    for (uint64_t lo = iv.lo; lo < iv.hi; lo += kChunk) {
      const uint64_t n = iv.hi - lo < kChunk ? iv.hi - lo : kChunk;
      const uint64_t r = resident(reinterpret_cast<void*>(lo), n, true);
      if (r != 0 && r != kUnknownPages) emit(kRawResident, lo, r, n);
    }
  }
}

}  // namespace heaplab::shim
