// This machine's MemAvailable, for the trace format's own checks (the
// format depends on nothing of heaplab's: common/machine.h reads it the
// same way for the layers above).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace heaplab::trace {

// Bytes (0: unknown, and checks then pass). HEAPLAB_MEMORY_AVAILABLE
// (bytes) replaces it, for tests.
inline uint64_t memory_available() {
  if (const char* v = std::getenv("HEAPLAB_MEMORY_AVAILABLE")) return std::strtoull(v, nullptr, 10);
  FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return uint64_t(kib) << 10;
}

}  // namespace heaplab::trace
