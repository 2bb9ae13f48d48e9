// Which allocator a program brings (allocators/linked.h), read from real
// executables, and the forwarder to glibc's malloc (libheaplab_glibc.so).
#include "allocators/linked.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

namespace heaplab::allocators {
namespace {

TEST(ProgramAllocator, LinkedAgainstJemalloc) {
#ifndef VICTIM_JEMALLOC
  GTEST_SKIP() << "no libjemalloc-dev: victim_jemalloc not built";
#else
  const auto a = program_allocator(VICTIM_JEMALLOC);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name, "jemalloc");
  EXPECT_EQ(a->library, "libjemalloc.so.2");
  EXPECT_EQ(a->own_api, std::vector<std::string>{"mallctl"});
#endif
}

TEST(ProgramAllocator, SystemAllocatorAndUnreadableFiles) {
  EXPECT_FALSE(program_allocator(VICTIM_C));
  EXPECT_FALSE(program_allocator("/bin/sh"));
  EXPECT_FALSE(program_allocator("/nonexistent"));
  EXPECT_FALSE(program_allocator(testing::TempDir()));  // a directory
  const std::string junk = testing::TempDir() + "/junk";
  std::ofstream(junk) << "\x7f"
                         "ELF but not really";
  EXPECT_FALSE(program_allocator(junk));
}

TEST(ProgramAllocator, DefinesMallocItself) {
  const auto a = program_allocator(HEAPLAB_GLIBC_FORWARD);  // a library that defines malloc
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name, "its own malloc");
  EXPECT_EQ(a->library, "");
}

// The forwarder finds glibc's functions in libc.so.6 itself, even when an
// allocator that exports the same names (tcmalloc exports __libc_malloc)
// was loaded first into the global scope, as a program linked against it has.
TEST(GlibcForwarder, FindsGlibcsOwnFunctions) {
#if defined(__SANITIZE_ADDRESS__)
  void* tc = nullptr;  // (tcmalloc in an ASan process: its own leaks and a second allocator)
#else
  void* tc = dlopen("libtcmalloc_minimal.so.4", RTLD_NOW | RTLD_GLOBAL);
#endif
  void* h = dlopen(HEAPLAB_GLIBC_FORWARD, RTLD_NOW | RTLD_LOCAL);
  ASSERT_TRUE(h) << dlerror();
  using Source = const char* (*)();
  auto source = reinterpret_cast<Source>(dlsym(h, "heaplab_glibc_forward_source"));
  ASSERT_TRUE(source);
  EXPECT_NE(std::string(source()).find("libc.so.6"), std::string::npos) << source();
  using Malloc = void* (*)(size_t);
  using Free = void (*)(void*);
  using Usable = size_t (*)(void*);
  using Memalign = int (*)(void**, size_t, size_t);
  auto fmalloc = reinterpret_cast<Malloc>(dlsym(h, "malloc"));
  auto ffree = reinterpret_cast<Free>(dlsym(h, "free"));
  auto fusable = reinterpret_cast<Usable>(dlsym(h, "malloc_usable_size"));
  auto fpm = reinterpret_cast<Memalign>(dlsym(h, "posix_memalign"));
  ASSERT_TRUE(fmalloc && ffree && fusable && fpm);
  void* p = fmalloc(100);
  ASSERT_TRUE(p);
  EXPECT_GE(fusable(p), 100u);
  EXPECT_EQ(fusable(nullptr), 0u);
  ffree(p);
  void* q = nullptr;
  EXPECT_EQ(fpm(&q, 4096, 10), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 4096, 0u);
  ffree(q);
  EXPECT_EQ(fpm(&q, 3, 10), EINVAL);  // glibc's own checks
  for (const char* op : {"_Znwm", "_ZdlPv", "_ZnwmSt11align_val_t", "_ZdlPvmSt11align_val_t"})
    EXPECT_TRUE(dlsym(h, op)) << op;
  dlclose(h);
  if (tc) dlclose(tc);
}

}  // namespace
}  // namespace heaplab::allocators
