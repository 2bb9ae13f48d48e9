// Files: writing outputs whole, and finding heaplab's own files.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace heaplab::common {

// The one way heaplab writes an output the user named. write(tmp) writes a
// temporary file (TARGET.heaplab-PID.part) and only a complete output
// reaches `output`, never half of one; a failed write leaves the user's
// existing file untouched. Then:
//  - a new file, or a regular file with no other hard link: the temporary
//    file is renamed over it, with the old file's mode;
//  - a symbolic link: what it names is written (the link stays a link);
//  - a device (/dev/null), a FIFO, or a file with other hard links: the
//    output is copied into it in place (never replaced by a regular file);
//  - a directory: refused.
// On failure the temporary file is removed and the exception passes on;
// errors are std::runtime_error "OUTPUT: cannot create: REASON" or
// "OUTPUT: cannot write: REASON".
void write_then_rename(const std::string& output, const std::function<void(const std::string& tmp)>& write);

// Writes `text` to `output` through write_then_rename; errors as above, or
// "OUTPUT: cannot write: REASON".
void write_text(const std::string& output, const std::string& text);
// Whether `output` can be written (a file made beside it, then removed),
// before the work that makes it: "" if so, else why not, in one line
// ("cannot write 'PATH': No such file or directory", "...: is a directory").
std::string output_problem(const std::string& output);
// Whether `output` names a file the command reads (one of `inputs`, by
// device and inode, through links and descriptor names): writing it would
// replace (or append to) what is being read. "" if not (or if it does not
// exist), else in one line: "'OUT' is the input 'IN': it would be
// replaced (name another output)".
std::string output_is_input(const std::string& output, const std::vector<std::string>& inputs);

// Reads a small input file the user named (an experiment's YAML, a replay
// result) whole, in one line of error (std::runtime_error) otherwise:
// "PATH: cannot open: REASON", "PATH: not a regular file (WHAT is read
// from a file, not a pipe or device)" (opened without waiting: a FIFO
// with no writer is refused at once instead of blocking), "PATH: N bytes,
// more than the M MiB WHAT may have". `what` names the kind of file.
std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// The directory of the running executable (where heaplab keeps the shim,
// the replayers and the dlfilter), or "." if /proc/self/exe cannot be read.
std::string self_dir();

}  // namespace heaplab::common
