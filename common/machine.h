// What this machine has, as heaplab's memory checks see it.
#pragma once

#include <cstdint>

namespace heaplab::common {

// MemAvailable from /proc/meminfo, bytes; 0 if unknown (checks then pass).
// HEAPLAB_MEMORY_AVAILABLE (bytes) replaces it, for tests. (The trace
// format, which depends on nothing, reads it on its own the same way.)
uint64_t memory_available();

}  // namespace heaplab::common
