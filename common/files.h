// Files: writing outputs whole, and finding heaplab's own files.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace heaplab::common {

// write(tmp) writes beside `output` (OUTPUT.heaplab-PID.part), which is then
// renamed over `output`: a failed write leaves no half-written file under
// the requested name, nor touches a user's existing file. On failure the
// temporary file is removed and the exception passes on; a failed rename
// throws std::runtime_error "OUTPUT: cannot create: REASON".
void write_then_rename(const std::string& output, const std::function<void(const std::string& tmp)>& write);

// Writes `text` to `output` through write_then_rename; errors as above, or
// "OUTPUT: cannot write: REASON".
void write_text(const std::string& output, const std::string& text);

// The directory of the running executable (where heaplab keeps the shim,
// the replayers and the dlfilter), or "." if /proc/self/exe cannot be read.
std::string self_dir();

}  // namespace heaplab::common
