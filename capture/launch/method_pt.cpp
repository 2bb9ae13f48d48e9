// The Intel PT method: `perf record` runs the program with the shim's
// ptwrite sink preloaded into it; afterwards each process the shim marked
// (DIR/PID.0.ptw) is decoded from perf.data and normalised into a trace.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "capture/launch/method.h"
#include "capture/normalise/raw_reader.h"
#include "capture/pt/pt_import.h"
#include "capture/pt/pt_record.h"

namespace heaplab::launch {
namespace {

namespace fs = std::filesystem;

class PtMethod : public CaptureMethod {
 public:
  const char* name() const override { return "pt"; }
  std::string starts(const CaptureOptions& opt, const std::string&) const override { return opt.pt.perf; }

  void command(const CaptureOptions& opt, CaptureResult& res, const std::string& preload,
               process::Spec& spec) const override {
    // perf runs the program; the shim is preloaded into the program only.
    res.perf_data = opt.raw_dir + "/perf.data";
    spec.env.emplace_back("HEAPLAB_CAPTURE_SINK", "ptwrite");
    spec.env.emplace_back("HEAPLAB_CAPTURE_NO_PTWRITE", "refuse");  // never SIGILL
    // No spare headers here: an inherited one (this capture runs inside a
    // software capture) belongs to the outer launcher, which must not count
    // this capture's images.
    spec.env.emplace_back("HEAPLAB_CAPTURE_SPARE", std::nullopt);
    spec.argv = pt::perf_record_argv(opt.pt, res.perf_data, preload, opt.argv);
    spec.search_path = true;
  }

  // perf exits with the program's status, or dies of its signal.
  void collect(CaptureOptions& opt, CaptureResult& res, const RunInfo& run) const override {
    auto t1 = std::chrono::steady_clock::now();
    struct Marker {
      uint32_t pid;
      bool root;  // the process perf started (the shim wrote its parent's pid into the marker)
    };
    std::vector<Marker> markers;
    for (const RawName& m : list_raw(opt.raw_dir, "ptw")) {
      if (m.gen != 0) continue;
      long ppid = -1;
      std::ifstream(m.path) >> ppid;
      markers.push_back({m.pid, ppid == long(run.pid)});
    }
    // The program's own first, then its fork children.
    std::sort(markers.begin(), markers.end(),
              [](const Marker& a, const Marker& b) { return std::tie(b.root, a.pid) < std::tie(a.root, b.pid); });
    // No marker: the program never started under the shim, so perf itself
    // failed (its own messages are above), unless the program just exited.
    if (markers.empty() && (res.exit_code != 0 || access(res.perf_data.c_str(), R_OK) != 0)) {
      res.failed.push_back(
          fmt::format("perf record failed ({}); see its messages above",
                      res.signal ? fmt::format("signal {}", res.signal) : fmt::format("exit {}", res.exit_code)));
    }
    if (!markers.empty() && access(res.perf_data.c_str(), R_OK) != 0) {
      res.failed.push_back(res.perf_data + ": perf wrote no recording (see its messages above)");
      markers.clear();
    }
    pt::PtImportOptions po;
    pt::parse_decoder(opt.pt_decoder, &po.decoder);
    po.perf = opt.pt.perf;
    po.dlfilter = (fs::path(opt.shim).parent_path() / "libheaplab_ptw_dlfilter.so").string();  // built beside the shim
    for (size_t i = 0; i < markers.size(); ++i) {
      const bool root = markers[i].root;
      const std::string out = trace_name(opt.output, markers[i].pid, 0, root);
      try {
        po.pid = markers[i].pid;
        std::string raw_path;
        pt::PtImportReport pr;
        try {
          pr = pt::decode_perf_pt(res.perf_data, opt.raw_dir, po, &raw_path);
        } catch (const pt::PtNoEvents&) {
          continue;  // the process never allocated
        }
        normalise::RawFile raw(raw_path);
        nlohmann::json meta = {{"method", "intel-pt"}, {"pt", pt::report_to_json(pr)}};
        TraceResult tr = normalise_to(raw, out, opt, res, root, meta);
        tr.pid = markers[i].pid;
        tr.command_line = {pr.comm};
        res.traces.push_back(std::move(tr));
        ::unlink(raw_path.c_str());
        ::unlink((raw_path + ".blocks").c_str());
        if (pr.cut || pr.stream.overflows || pr.aux_truncated || pr.aux_gaps)
          res.notes.push_back(
              fmt::format("{}: Intel PT lost data: {} overflow packets, {} truncated AUX records, "
                          "{} AUX gaps; {} events lost (lost markers in the trace)",
                          out, pr.stream.overflows, pr.aux_truncated, pr.aux_gaps, pr.lost));
      } catch (const std::exception& e) {
        res.failed.push_back(e.what());
      }
    }
    res.normalise_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
};

}  // namespace

std::unique_ptr<CaptureMethod> pt_method() { return std::make_unique<PtMethod>(); }

}  // namespace heaplab::launch
