/* Known heap calls under glibc's mtrace(3), for the mtrace importer's test:
 * run with LD_PRELOAD=libc_malloc_debug.so.0 MALLOC_TRACE=FILE. One block
 * made before tracing starts (its free is unknown to the log), every
 * allocation call, a moving realloc, realloc(NULL, n) and realloc(p, 0), a
 * failed malloc and a failed realloc; no stdio (its buffers would allocate). */
#include <malloc.h>
#include <mcheck.h>
#include <stdint.h>
#include <stdlib.h>

int main(void) {
  void* before = malloc(7);
  mtrace();
  void* a = malloc(16);
  void* b = calloc(4, 8);
  a = realloc(a, 100);
  void* c = memalign(64, 200);
  void* d = NULL;
  if (posix_memalign(&d, 128, 300) != 0) return 1;
  void* e = aligned_alloc(256, 512);
  free(b);
  free(c);
  free(d);
  free(e);
  void* f = realloc(NULL, 40);
  f = realloc(f, 0);
  free(NULL);
  volatile size_t huge = SIZE_MAX / 2;
  void* g = malloc(huge);
  void* h = realloc(a, huge);
  free(before);
  free(a);
  free(malloc(0)); /* mtrace writes its size as a bare 0 */
  muntrace();
  return g != NULL || h != NULL || f != NULL;
}
