// Where glibc keeps each thread's rseq area (rseq(2); glibc 2.35 and later
// register one for every thread it starts): the offset of its rseq_cs field
// from the thread pointer, or 0 with none (an older glibc, a kernel or a
// tunable that said no, not x86-64). Looked up with dlsym, not linked: the
// two symbols are the dynamic loader's, and the shim needs libc only. (A
// thread whose registration failed still has the area, where the kernel
// never looks.) libc only: the shim (sink_file.cpp) and its tests use it.
#pragma once

#include <dlfcn.h>
#include <linux/rseq.h>
#include <stddef.h>
#include <stdint.h>

namespace heaplab::shim {

inline intptr_t find_rseq_cs_offset() {
#if defined(__x86_64__)
  const auto* size = static_cast<const unsigned int*>(dlsym(RTLD_DEFAULT, "__rseq_size"));
  const auto* offset = static_cast<const ptrdiff_t*>(dlsym(RTLD_DEFAULT, "__rseq_offset"));
  if (size && offset && *size >= offsetof(struct rseq, rseq_cs) + sizeof(uint64_t))
    return intptr_t(*offset) + intptr_t(offsetof(struct rseq, rseq_cs));
#endif
  return 0;
}

}  // namespace heaplab::shim
