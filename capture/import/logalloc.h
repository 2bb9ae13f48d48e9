// Importer for Firefox's logalloc logs (memory/replace/logalloc: MALLOC_LOG),
// one call a line, "PID TID function(args)[=result]":
//   1234 5678 malloc(42)=0x7f0a3c0012a0
//   1234 5679 free(0x7f0a3c0012a0)             (another thread's block: kept)
//   1234 5678 calloc(2,16)=0x7f0a3c001300      realloc(PTR,SIZE)=PTR
//   memalign(ALIGN,SIZE)=PTR  posix_memalign(ALIGN,SIZE)=PTR  aligned_alloc(ALIGN,SIZE)=PTR  valloc(SIZE)=PTR
//   moz_arena_malloc(ARENA,SIZE)=PTR and its siblings (the arena dropped:
//   heaplab replays one heap), jemalloc_stats(), moz_create_arena()=N,
//   moz_dispose_arena(N) (skipped).
// Pointers are hex (0x...; (nil) or 0 for NULL) or, in logs made by
// logalloc_munge.py, "#N" slots. Logs of older logalloc without the TID
// field ("PID function(args)") are read too, on one thread. Threads are
// kept (a thread per TID, in order of appearance, with its TID). A log of
// several processes (fork children) is imported for its first PID; the
// other processes' lines are counted. Streams: memory follows the live
// blocks and the threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capture/format/trace_writer.h"
#include "capture/import/import_file.h"
#include "capture/import/input_stream.h"

namespace heaplab::import {

struct LogallocImportReport {
  uint64_t lines = 0;
  uint64_t events = 0;
  uint64_t threads = 0;
  uint64_t pid = 0;                  // the process imported
  uint64_t other_process_lines = 0;  // lines of other PIDs: not imported
  uint64_t skipped_calls = 0;        // jemalloc_stats, arena creation and disposal
  uint64_t unknown_frees = 0;        // frees of blocks never allocated in the log: not written
  uint64_t unknown_reallocs = 0;     // reallocs of such blocks: written as realloc(NULL, n)
  uint64_t reused_live = 0;          // an allocation at an address still live: the old block leaks
  uint64_t first_unknown_free_line = 0;
};

// Reads every line of `in` and appends the events to `w`, a thread per TID.
// Throws InputError "NAME:LINE: ..." on a line it cannot use. Does not
// close the writer.
LogallocImportReport import_logalloc(InputStream& in, trace::TraceWriter& w);

using LogallocFileImport = FileImport<LogallocImportReport>;
LogallocFileImport import_logalloc_file(const std::string& input, const std::string& output, trace::WriterOptions opt,
                                        const std::vector<std::string>& command_line);

}  // namespace heaplab::import
