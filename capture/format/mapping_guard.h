// Files read through a mapping, and what happens when one shrinks while it
// is read. Another program that rewrites or truncates a mapped file (a
// capture writing a trace of the same name, `cp` over it) leaves pages of
// the mapping past the file's new end: touching one raises SIGBUS, which
// killed the reader with "Bus error" and no word of which file. A guarded
// mapping turns that into a one-line error naming the file and exit status
// 2, as for any other bad input. (What the reader did with the pages before
// they went is lost: the process ends at once, from the signal handler.)
#pragma once

#include <cstddef>
#include <string>

namespace heaplab::trace {

// What a guarded mapping's fault says of its file (after "PATH: ").
inline constexpr const char* kShrankText =
    "the file shrank while it was read (rewritten or truncated by another program?)";

// Registers [base, base + len) as a mapping of `path` (a SIGBUS handler is
// installed at the first). Up to 64 at once; beyond that a mapping is not
// guarded (a SIGBUS in it ends the process as before). The message is made
// here, not in the handler: "heaplab: error: PATH: the file shrank while it
// was read (rewritten or truncated by another program?)", said once however
// many threads fault. Only the kernel's BUS_ADRERR in a guarded range is
// taken; any other SIGBUS goes to the disposition before (and the guard is
// off from then on).
void guard_mapping(const void* base, size_t len, const std::string& path);
// A guarded mapping's fault also writes `text` (at most 512 bytes) to `fd`
// first: the replayer's result pipe, whose reader then knows why it ended.
void guard_mapping_report(const void* base, int fd, const std::string& text);
// Before the mapping goes (munmap). Does nothing for one not guarded.
void unguard_mapping(const void* base);

}  // namespace heaplab::trace
