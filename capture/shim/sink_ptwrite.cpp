// The ptwrite sink (Intel PT route): emit() writes each event as five
// ptwrite payloads (sink.h, capture/shim/ptw_format.h) that `perf record -e
// intel_pt/ptw=1,branch=0/u` stores in its AUX buffers; nothing is written
// to files but a marker per process image (DIR/PID.GEN.ptw, holding its
// parent's pid), which tells heaplab which processes were captured and keeps
// exec detection working as with raw files. libc only.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "capture/shim/shim_util.h"
#include "capture/shim/sink.h"

namespace heaplab::shim {

bool g_ptwrite = false;
__thread uint32_t t_pt_seq __attribute__((tls_model("initial-exec"))) = 0;

bool cpu_has_ptwrite() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) < 0x14) return false;
  __cpuid_count(7, 0, a, b, c, d);
  if (!((b >> 25) & 1u)) return false;  // no Intel PT
  __cpuid_count(0x14, 0, a, b, c, d);
  return (b >> 4) & 1u;
#else
  return false;
#endif
}

bool ptwrite_open(const char* dir) {
  char path[4096];
  uint32_t gen = 0;
  const int fd = create_image_file(dir, ".ptw", O_WRONLY, path, sizeof path, &gen);
  if (fd == -2) {
    shim_error("capture directory path too long", 0);
    return false;
  }
  if (fd < 0) {
    shim_error_path("cannot create the ptwrite marker file", path, errno);
    return false;
  }
  // Its parent's pid: heaplab tells the process perf started (the program)
  // from its fork children.
  char ppid[24];
  uint64_t n = 0;
  ppid[0] = 0;
  append_u64(ppid, sizeof ppid, &n, uint64_t(getppid()));
  append(ppid, sizeof ppid, &n, "\n");
  ssize_t w = write(fd, ppid, n);
  (void)w;
  close(fd);
  g_clock = raw::kClockTsc;
  t_pt_seq = 0;
  g_ptwrite = true;
  __atomic_store_n(&g_capturing, true, __ATOMIC_RELEASE);
  return true;
}

}  // namespace heaplab::shim
