#include "allocators/system.h"

#include <dlfcn.h>
#include <link.h>

#include <stdexcept>

namespace heaplab::allocators {

// A function the library defines itself (not one of its dependencies').
template <typename F>
F Custom::own(const char* name, const std::string& lib_name) {
  void* f = dlsym(handle, name);
  Dl_info info{};
  if (!f || !dladdr(f, &info) || !info.dli_fname || lib_name != info.dli_fname) {
    emulated.push_back(name);
    return nullptr;
  }
  return reinterpret_cast<F>(f);
}

void Custom::load(const std::string& path) {
  handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!handle) {
    const char* e = dlerror();
    throw std::invalid_argument("--load direct: cannot load it directly: " + std::string(e ? e : "dlopen failed") +
                                " (try --load preload)");
  }
  link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name)
    throw std::invalid_argument("--load direct: cannot find where '" + path + "' was loaded");
  const std::string name = lm->l_name;
  f_malloc = own<decltype(f_malloc)>("malloc", name);
  f_free = own<decltype(f_free)>("free", name);
  f_realloc = own<decltype(f_realloc)>("realloc", name);
  if (!f_malloc || !f_free || !f_realloc)
    throw std::invalid_argument("--load direct: '" + path + "' does not define malloc, free and realloc itself");
  emulated.clear();
  f_calloc = own<decltype(f_calloc)>("calloc", name);
  f_reallocarray = own<decltype(f_reallocarray)>("reallocarray", name);
  f_memalign = own<decltype(f_memalign)>("memalign", name);
  f_posix_memalign = own<decltype(f_posix_memalign)>("posix_memalign", name);
  f_aligned_alloc = own<decltype(f_aligned_alloc)>("aligned_alloc", name);
  f_valloc = own<decltype(f_valloc)>("valloc", name);
  f_pvalloc = own<decltype(f_pvalloc)>("pvalloc", name);
}

}  // namespace heaplab::allocators
