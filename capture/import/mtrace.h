// Importer for glibc's malloc trace (mtrace(3): MALLOC_TRACE=FILE with
// libc_malloc_debug.so preloaded, glibc 2.34 on), one call a line:
//   = Start
//   @ ./prog:[0x121c] + 0x5654bcbfd2a0 0x10      an allocation (malloc, calloc,
//                                                memalign, ... alike) of 0x10 bytes
//   @ ./prog:[0x1290] - 0x5654bcbfd4a0           a free (also realloc(p, 0))
//   @ ./prog:[0x1244] < 0x5654bcbfd2a0           a realloc of this block...
//   @ ./prog:[0x1244] > 0x5654bcbfd4d0 0x64      ...to this one, of 0x64 bytes
//   @ ./prog:[0x1311] + (nil) 0xffffffffffffffff a failed allocation
//   @ ./prog:[0x1333] ! 0x5654bcbfd4d0 0x1000     a failed realloc (the block stays)
//   = End
// What mtrace does not record, the trace cannot have: threads (every call
// is on one thread), which call made a block (each "+" is a malloc), the
// alignment asked for, and times. Blocks freed that were allocated before
// mtrace() started are counted and skipped. Streams: memory follows the
// live blocks, not the input's length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capture/format/trace_writer.h"
#include "capture/import/import_file.h"
#include "capture/import/input_stream.h"

namespace heaplab::import {

struct MtraceImportReport {
  uint64_t lines = 0;              // lines read
  uint64_t events = 0;             // events written
  uint64_t traces = 0;             // "= Start" lines (mtrace() calls)
  uint64_t unknown_frees = 0;      // frees of blocks allocated before tracing: not written
  uint64_t unknown_reallocs = 0;   // reallocs of such blocks: written as realloc(NULL, n)
  uint64_t reused_live = 0;        // an allocation at an address still live: the old block leaks
  uint64_t failed = 0;             // failed allocations and reallocs
  uint64_t unpaired_reallocs = 0;  // a "<" line without its ">" (a trace cut short)
  uint64_t first_unknown_free_line = 0;
};

// Reads every line of `in` and appends the events to `w` (thread 0). Throws
// InputError "NAME:LINE: ..." on a line it cannot use, and TraceError on
// write failures. Does not close the writer.
MtraceImportReport import_mtrace(InputStream& in, trace::TraceWriter& w);

using MtraceFileImport = FileImport<MtraceImportReport>;
// `input` (plain, compressed, or - for stdin) into the trace `output`,
// written whole, with heaplab's metadata and the import's counts.
MtraceFileImport import_mtrace_file(const std::string& input, const std::string& output, trace::WriterOptions opt,
                                    const std::vector<std::string>& command_line);

}  // namespace heaplab::import
