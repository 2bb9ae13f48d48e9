// A C++ program with exactly known heap calls, for the capture tests.
//   victim_cpp api            every allocation API once (see the test for the list)
//   victim_cpp threads P C N  P producer threads allocate N objects each and hand
//                             them to C consumer threads, which free them
// Calls are bracketed by malloc(777001)/free and malloc(777002)/free markers.
#include <malloc.h>
#include <stdlib.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

static void marker(size_t n) { free(malloc(n)); }
static void* volatile sink;

static int api() {
  marker(777001);
  void* p = malloc(16);
  void* c = calloc(4, 10);
  p = realloc(p, 32);
  void* ra = reallocarray(nullptr, 5, 6);
  ra = reallocarray(ra, 7, 6);
  void* m = memalign(64, 100);
  void* pm = nullptr;
  int rc = posix_memalign(&pm, 128, 200);
  void* bad = nullptr;
  int rc2 = posix_memalign(&bad, 3, 10);  // EINVAL: alignment not a power of two
  void* aa = aligned_alloc(256, 512);
  void* v = valloc(300);
  void* pv = pvalloc(5000);
  free(p);
  free(c);
  free(ra);
  free(m);
  free(pm);
  free(aa);
  free(v);
  free(pv);
  sink = reinterpret_cast<void*>(uintptr_t(rc + rc2));

  void* n1 = ::operator new(24);
  void* n2 = ::operator new[](40);
  void* n3 = ::operator new(56, std::nothrow);
  void* n4 = ::operator new[](72, std::nothrow);
  void* n5 = ::operator new(88, std::align_val_t(64));
  void* n6 = ::operator new[](104, std::align_val_t(128));
  void* n7 = ::operator new(120, std::align_val_t(32), std::nothrow);
  void* n8 = ::operator new[](136, std::align_val_t(256), std::nothrow);
  void* n9 = ::operator new(8);
  void* n10 = ::operator new[](8);
  void* n11 = ::operator new(8, std::align_val_t(64));
  void* n12 = ::operator new[](8, std::align_val_t(64));
  void* n13 = ::operator new(8);
  void* n14 = ::operator new[](8);
  void* n15 = ::operator new(8, std::align_val_t(64));
  void* n16 = ::operator new[](8, std::align_val_t(64));
  ::operator delete(n1);
  ::operator delete[](n2);
  ::operator delete(n3, 56);
  ::operator delete[](n4, 72);
  ::operator delete(n5, std::align_val_t(64));
  ::operator delete[](n6, std::align_val_t(128));
  ::operator delete(n7, 120, std::align_val_t(32));
  ::operator delete[](n8, 136, std::align_val_t(256));
  ::operator delete(n9, std::nothrow);
  ::operator delete[](n10, std::nothrow);
  ::operator delete(n11, std::align_val_t(64), std::nothrow);
  ::operator delete[](n12, std::align_val_t(64), std::nothrow);
  ::operator delete(n13);
  ::operator delete[](n14);
  ::operator delete(n15, std::align_val_t(64));
  ::operator delete[](n16, std::align_val_t(64));
  void* huge = ::operator new(SIZE_MAX / 2, std::nothrow);  // fails: nullptr
  sink = huge;
  bool threw = false;
  try {
    sink = ::operator new(SIZE_MAX / 2);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  marker(777002);
  return threw ? 0 : 1;
}

struct Queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<char*> items;
  int producers_left;
};

static int threads(int producers, int consumers, long n) {
  Queue q;
  q.producers_left = producers;
  marker(777001);
  {
    std::vector<std::thread> ts;
    ts.reserve(size_t(producers + consumers));
    for (int p = 0; p < producers; ++p)
      ts.emplace_back([&q, n, p] {
        for (long i = 0; i < n; ++i) {
          char* obj = static_cast<char*>(malloc(size_t(16 + (i + p) % 64)));
          obj[0] = 1;
          std::lock_guard<std::mutex> g(q.mu);
          q.items.push_back(obj);
          q.cv.notify_one();
        }
        std::lock_guard<std::mutex> g(q.mu);
        if (--q.producers_left == 0) q.cv.notify_all();
      });
    for (int c = 0; c < consumers; ++c)
      ts.emplace_back([&q] {
        for (;;) {
          std::unique_lock<std::mutex> g(q.mu);
          q.cv.wait(g, [&] { return !q.items.empty() || q.producers_left == 0; });
          if (q.items.empty()) return;
          char* obj = q.items.front();
          q.items.pop_front();
          g.unlock();
          free(obj);
        }
      });
    for (auto& t : ts) t.join();
  }
  marker(777002);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && !std::strcmp(argv[1], "api")) return api();
  if (argc == 5 && !std::strcmp(argv[1], "threads"))
    return threads(std::atoi(argv[2]), std::atoi(argv[3]), std::atol(argv[4]));
  return 2;
}
