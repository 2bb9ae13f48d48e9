/* A program linked against jemalloc that hands heap blocks to jemalloc's
 * own functions (mallocx, then dallocx): on another allocator those calls
 * would mix two allocators' blocks, so `heaplab capture --allocator glibc`
 * must refuse it. */
#include <stddef.h>

void* mallocx(size_t size, int flags);
void dallocx(void* ptr, int flags);

int main(void) {
  void* p = mallocx(64, 0);
  if (!p) return 1;
  dallocx(p, 0);
  return 0;
}
