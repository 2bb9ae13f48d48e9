#include "capture/import/import_file.h"

#include "capture/import/metadata.h"
#include "common/files.h"

namespace heaplab::import {

ImportedFile write_import(const std::string& input, const std::string& output, trace::WriterOptions opt,
                          const std::vector<std::string>& command_line, const std::string& from,
                          const std::function<nlohmann::json(InputStream& in, trace::TraceWriter& w)>& import) {
  auto in = InputStream::open(input);
  nlohmann::json meta = base_metadata("import", "none", command_line);
  meta["import"] = {{"from", from}, {"source", in->name()}, {"compression", in->compression()}};
  opt.metadata_json = meta.dump();
  // The live heap's peak and the objects live at once, stated as a capture
  // states them, so that a replay that cannot fit is refused before its
  // plan is built.
  opt.count_heap_peak = true;
  ImportedFile r;
  r.source = in->name();
  r.compression = in->compression();
  common::write_then_rename(output, [&](const std::string& tmp) {
    trace::TraceWriter w(tmp, opt);
    meta["import"].update(import(*in, w));
    meta["capture"]["heap_live_peak_bytes"] = w.heap_live_peak();
    meta["capture"]["live_objects_peak"] = w.live_objects_peak();
    w.set_final_metadata(meta.dump());
    w.close();
    r.bytes = w.bytes_written();
  });
  return r;
}

}  // namespace heaplab::import
