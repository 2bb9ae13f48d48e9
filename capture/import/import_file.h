// A whole import of another tool's file into a trace, for every importer
// (cmt_text, mtrace, heaptrack, logalloc): the input opened (plain,
// compressed, or - for stdin), the trace written whole
// (common::write_then_rename) with heaplab's metadata, whose "import"
// object says where the events came from and holds the importer's counts.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capture/format/trace_writer.h"
#include "capture/import/input_stream.h"

namespace heaplab::import {

struct ImportedFile {
  uint64_t bytes = 0;       // the trace's size
  std::string source;       // the input's name
  std::string compression;  // "none", "gzip", ...
};

// An importer's whole import: the file's figures and the importer's report.
template <class Report>
struct FileImport : ImportedFile {
  Report report;
};

// Imports `input` into `output`: `import(in, w)` writes the events (and the
// threads' names) and returns the counts, which join {"from": FROM,
// "source", "compression"} in the metadata's "import" object; the writer
// counts the live heap's peak and the objects live at once, the metadata's
// capture.heap_live_peak_bytes and capture.live_objects_peak. Throws what
// the input, the importer or the writer throw; `output` is then untouched.
ImportedFile write_import(const std::string& input, const std::string& output, trace::WriterOptions opt,
                          const std::vector<std::string>& command_line, const std::string& from,
                          const std::function<nlohmann::json(InputStream& in, trace::TraceWriter& w)>& import);

}  // namespace heaplab::import
