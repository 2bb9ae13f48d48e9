// Importer for the text form of Compact Memory Traces (CTSRD-CHERI/cmt):
//   malloc(56) = 0x800e00000        calloc(4, 16) = 0x800e00040
//   realloc(0x800e00038, 64) = 0x800e00100
//   free(0x800e00050)
// and trace2cmt's tagged form, "malloc(96) = 81d21e160<5>", "free(81d2899c0<3>)".
// Also accepted: reallocarray, memalign, posix_memalign, aligned_alloc,
// valloc, pvalloc with the same "name(args) = result" shape; blank lines and
// lines starting with '#'. A NULL result is 0, 0x0, (nil) or NULL.
#pragma once

#include <cstdint>
#include <string>

#include "capture/format/trace_writer.h"
#include <string>
#include <vector>

#include "capture/import/import_file.h"
#include "capture/import/input_stream.h"

namespace heaplab::import {

struct CmtImportReport {
  uint64_t lines = 0;             // lines read
  uint64_t events = 0;            // events written
  uint64_t skipped_lines = 0;     // blank or comment lines
  uint64_t unknown_frees = 0;     // free() of an address never returned: not written
  uint64_t unknown_reallocs = 0;  // realloc() of an unknown address: written as realloc(NULL, n)
  uint64_t reused_live = 0;       // an allocation returned an address still live: old one leaks
  uint64_t null_results = 0;      // allocations that returned NULL
  uint64_t first_unknown_free_line = 0;
};

// Reads every line of `in` and appends the events to `w` (thread 0). Throws
// InputError "NAME:LINE: ..." on a line it cannot parse, and TraceError on
// write failures. Does not close the writer.
CmtImportReport import_cmt_text(InputStream& in, trace::TraceWriter& w);

// A whole import: `input` (plain, compressed, or - for stdin) into the trace
// `output`, written whole (common::write_then_rename), with heaplab's
// metadata (`command_line`: the command that asked for it) and the import's
// counts in it.
using CmtFileImport = FileImport<CmtImportReport>;
CmtFileImport import_cmt_file(const std::string& input, const std::string& output, trace::WriterOptions opt,
                              const std::vector<std::string>& command_line);

}  // namespace heaplab::import
