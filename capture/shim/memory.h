// The program's own memory besides malloc: anonymous mmap/munmap/mremap,
// madvise(MADV_DONTNEED/MADV_FREE) and brk/sbrk made by the program (not by
// the allocator while it serves malloc, nor by the shim), and how many pages
// of large heap blocks and of those mappings were resident when released or
// at exit (mincore(2)). Records: raw_format.h, kRawMmap ... kRawResident.
//
// Whose call it is: the caller's return address. A call from the text of the
// allocator's object (the one defining the next malloc) or of the shim is
// the allocator's and passes through unrecorded; so do calls before start-up
// ends (an allocator's constructor runs before the shim's). glibc's own
// malloc calls mmap and brk inside libc, never through these symbols.
//
// libc only, no allocation: the table of large blocks is an
// open-addressing table in memory of its own (mmap'd; never freed, so a
// lookup racing a resize reads a consistent old table); the program's mappings
// are sorted intervals, so that a munmap finds every one it overlaps.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

namespace heaplab::shim {

struct RealMemory {
  void* (*mmap)(void*, size_t, int, int, int, off_t);
  int (*munmap)(void*, size_t);
  void* (*mremap)(void*, size_t, size_t, int, ...);
  int (*madvise)(void*, size_t, int);
  int (*brk)(void*);
  void* (*sbrk)(intptr_t);
};
extern RealMemory g_mem;

// Resolves the next definitions and notes the text ranges of the shim and of
// the object that defines `allocator_malloc`. Called from start-up.
void memory_resolve(const void* allocator_malloc);

void* hook_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off, const void* caller);
int hook_munmap(void* addr, size_t len, const void* caller);
void* hook_mremap(void* old, size_t old_len, size_t new_len, int flags, void* new_addr, const void* caller);
int hook_madvise(void* addr, size_t len, int advice, const void* caller);
int hook_brk(void* addr, const void* caller);
void* hook_sbrk(intptr_t incr, const void* caller);

// Large heap blocks: noted when made, measured when released.
extern bool g_large_any;  // a large block or mapping was ever noted (fast path test)
void large_made(const void* p, uint64_t bytes);
void large_released_slow(const void* p);
inline void large_released(const void* p) {
  if (__builtin_expect(g_large_any, 0) && p) large_released_slow(p);
}

// At exit: resident pages of every large block and mapping still live.
void memory_exit_scan();
// In a fork child: the lock may have been held by a thread that is gone.
void memory_after_fork();

// Resident pages of [p, p+len) (rounded out to pages); raw::kUnknownPages if
// mincore failed for some of it.
uint64_t resident_pages(const void* p, uint64_t len);

}  // namespace heaplab::shim
