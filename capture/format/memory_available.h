// This machine's MemAvailable, for heaplab's memory checks: the trace
// format's own, and those of every layer above it (replay, the PT route).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

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

// What a count growing one at a time, of items of `bytes_each` bytes, would
// need at its next doubling, against the memory available: checked at each
// doubling from `from` on; nullopt where it fits, is not checked, or the
// memory available is not known.
struct MemoryShortfall {
  uint64_t need, available;  // bytes
};
inline std::optional<MemoryShortfall> doubling_short_of_memory(uint64_t n, uint64_t from, uint64_t bytes_each) {
  if (n < from || (n & (n - 1)) != 0) return std::nullopt;
  const uint64_t need = n * 2 * bytes_each, available = memory_available();
  if (available == 0 || need <= available) return std::nullopt;
  return MemoryShortfall{need, available};
}

}  // namespace heaplab::trace
