// Importer for heaptrack's recordings (the .zst files heaptrack 1.4 writes:
// heaptrack_interpret's text, file format 3), lines of which heaplab uses:
//   v 10400 3          heaptrack's version (hex) and the file format
//   a SIZE TRACE       an allocation kind: its size and backtrace (hex); kinds are numbered 0, 1, ...
//   + KIND             an allocation of that kind
//   - KIND             a deallocation of an allocation of that kind
//   c MS               the time since start, in ms (hex), from here on
// and the rest (X command line, I page size, s strings, i instruction
// pointers, t backtraces, R RSS, A attached, S suppressions, # comments) are
// skipped, as are records of kinds a newer heaptrack may add (counted).
// What heaptrack does not record, the trace cannot have: threads (every
// call is on one thread), which call made a block (each is a malloc; a
// realloc is heaptrack's deallocation then allocation), failed calls, and
// which block of a kind a deallocation releases: heaptrack names only the
// kind (size and backtrace), so the newest live block of the kind is taken,
// which leaves every moment's live bytes and object count exact. Times are
// those of the last "c" line, at ms resolution. A deallocation of a kind
// with no live block (heaptrack attached to a running program) is counted
// and skipped. Streams: memory follows the live blocks and the kinds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capture/format/trace_writer.h"
#include "capture/import/import_file.h"
#include "capture/import/input_stream.h"

namespace heaplab::import {

struct HeaptrackImportReport {
  uint64_t lines = 0;          // lines read
  uint64_t events = 0;         // events written
  uint64_t allocations = 0;    // "+" lines
  uint64_t deallocations = 0;  // "-" lines written
  uint64_t kinds = 0;          // "a" lines
  uint64_t unknown_frees = 0;  // "-" of a kind with no live block: not written
  uint64_t times = 0;          // "c" lines
  uint64_t version = 0;        // heaptrack's, e.g. 0x10400 for 1.4.0
  uint64_t file_format = 0;    // 3 for heaptrack 1.4
  std::string command;         // the "X" line: the recorded command
  uint64_t first_unknown_free_line = 0;
  uint64_t other_records = 0;  // records of kinds heaplab does not know (a newer heaptrack's): skipped
};

// Reads every line of `in` and appends the events to `w` (thread 0). Throws
// InputError "NAME:LINE: ..." on a line it cannot use or a file format it
// does not know, and TraceError on write failures. Does not close the writer.
HeaptrackImportReport import_heaptrack(InputStream& in, trace::TraceWriter& w);

using HeaptrackFileImport = FileImport<HeaptrackImportReport>;
HeaptrackFileImport import_heaptrack_file(const std::string& input, const std::string& output, trace::WriterOptions opt,
                                          const std::vector<std::string>& command_line);

}  // namespace heaplab::import
