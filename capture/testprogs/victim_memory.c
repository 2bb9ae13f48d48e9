// The program's own memory, for capture_test: anonymous mappings, their
// release, the break, and large blocks written in part.
//   victim_memory maps    the exact sequence capture_test expects (see there)
//   victim_memory hidden  64 MiB the shim cannot see (a direct system call),
//                         held for 100 ms: the trace explains little of it
//   victim_memory loop N  N times: map 64 KiB, write a page of it, advise it
//                         away and unmap it, with a malloc and free beside
//                         (scripts/bench-memory-records.py: 4 memory records
//                         and 2 heap calls a round)
//   victim_memory untouched G N
//                         G blocks of a GiB from malloc, never written (a
//                         heap bigger than the machine's memory costs it
//                         nothing), N pairs of small mallocs and frees, then
//                         the blocks freed (replay_test and
//                         scripts/bench-refusals.py: a replay that cannot fit)
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KIB 1024ul
#define MIB (1024ul * 1024ul)
#define PAGE 4096ul

static void write_pages(char* p, unsigned long pages) {
  for (unsigned long i = 0; i < pages; ++i) p[i * PAGE] = 1;
}

static void sleep_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

static int maps(void) {
  free(malloc(777001));
  // 1. 1 MiB mapped, 64 pages written; 32 of them given back; grown to 2 MiB
  //    (it may move); unmapped in two halves.
  char* a = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) return 1;
  write_pages(a, 64);
  madvise(a, 128 * KIB, MADV_DONTNEED);
  char* b = mremap(a, MIB, 2 * MIB, MREMAP_MAYMOVE);
  if (b == MAP_FAILED) return 1;
  munmap(b + MIB, MIB);
  munmap(b, MIB);
  // 2. A file mapping: not the program's anonymous memory, not recorded.
  int fd = open("/proc/self/exe", O_RDONLY);
  char* f = fd >= 0 ? mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  if (f != MAP_FAILED) munmap(f, PAGE);
  if (fd >= 0) close(fd);
  // 3. The break, moved up by 64 KiB (16 pages written) and back.
  char* brk0 = sbrk(0);
  if (sbrk(64 * KIB) == (void*)-1) return 1;
  write_pages(brk0, 16);
  if (brk(brk0) != 0) return 1;
  // 4. A large block written in part (25 of 256 pages), freed; another
  //    (3 of 512 pages) and a mapping (16 of 128 pages) live at exit.
  char* big = aligned_alloc(PAGE, MIB);
  write_pages(big, 25);
  free(big);
  char* kept = aligned_alloc(PAGE, 2 * MIB);
  write_pages(kept, 3);
  char* c = mmap(NULL, 512 * KIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (c == MAP_FAILED) return 1;
  write_pages(c, 16);
  free(malloc(777002));
  return 0;
}

static int hidden(void) {
  long r = syscall(SYS_mmap, NULL, 64 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == -1) return 1;
  write_pages((char*)r, 64 * MIB / PAGE);
  char* small = malloc(100000);
  memset(small, 1, 100000);
  sleep_ms(100);
  free(small);
  return 0;
}

static int loop(long rounds) {
  unsigned long sum = 0;
  for (long i = 0; i < rounds; ++i) {
    char* p = mmap(NULL, 64 * KIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    p[(i % 16) * PAGE] = (char)i;
    madvise(p, 16 * KIB, MADV_DONTNEED);
    munmap(p, 64 * KIB);
    char* q = malloc(32 + (unsigned long)i % 64);
    if (!q) return 1;
    q[0] = (char)i;
    sum += (unsigned char)q[0];
    free(q);
  }
  printf("%lu\n", sum);
  return 0;
}

static int untouched(long gib, long pairs) {
  char** blocks = calloc((size_t)gib + 1, sizeof *blocks);
  if (!blocks) return 1;
  for (long i = 0; i < gib; ++i)
    if (!(blocks[i] = malloc(1024 * 1024 * KIB))) return 1;
  unsigned long sum = 0;
  for (long i = 0; i < pairs; ++i) {
    char* q = malloc(16 + (unsigned long)i % 200);
    if (!q) return 1;
    q[0] = (char)i;
    sum += (unsigned char)q[0];
    free(q);
  }
  for (long i = 0; i < gib; ++i) free(blocks[i]);
  free(blocks);
  printf("%lu\n", sum);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: victim_memory maps|hidden|loop N|untouched G N\n");
    return 2;
  }
  if (strcmp(argv[1], "maps") == 0) return maps();
  if (strcmp(argv[1], "hidden") == 0) return hidden();
  if (strcmp(argv[1], "loop") == 0 && argc == 3) return loop(atol(argv[2]));
  if (strcmp(argv[1], "untouched") == 0 && argc == 4) return untouched(atol(argv[2]), atol(argv[3]));
  fprintf(stderr, "victim_memory: unknown scenario %s\n", argv[1]);
  return 2;
}
