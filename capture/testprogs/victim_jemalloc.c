/* A program linked against jemalloc (as Debian's redis-server is), which
 * also calls jemalloc's own mallctl: keeps 16 blocks of 1 MiB live and
 * writes to the file named by argv[1] how many bytes jemalloc says it has
 * allocated. Run on jemalloc that is at least 16 MiB; run on another
 * allocator (capture --allocator glibc preloads a forwarder to glibc's
 * malloc) jemalloc has allocated next to nothing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen);

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* p[16];
  for (int i = 0; i < 16; ++i) {
    p[i] = malloc(1 << 20);
    if (!p[i]) return 1;
    memset(p[i], i, 4096);
  }
  uint64_t epoch = 1;
  size_t len = sizeof epoch;
  mallctl("epoch", &epoch, &len, &epoch, len);
  size_t allocated = 0;
  len = sizeof allocated;
  if (mallctl("stats.allocated", &allocated, &len, NULL, 0) != 0) return 1;
  FILE* f = fopen(argv[1], "w");
  if (!f) return 1;
  fprintf(f, "%zu\n", allocated);
  fclose(f);
  for (int i = 0; i < 16; ++i) free(p[i]);
  return 0;
}
