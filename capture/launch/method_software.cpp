// The software method: the shim writes each thread's events into per-process
// raw files (DIR/PID.GEN.hlraw), which are normalised, in parallel, into a
// trace each once the program has exited.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "capture/launch/method.h"
#include "capture/normalise/raw_reader.h"

namespace heaplab::launch {
namespace {

class SoftwareMethod : public CaptureMethod {
 public:
  const char* name() const override { return "software"; }

  void command(const CaptureOptions& opt, CaptureResult&, const std::string& preload,
               process::Spec& spec) const override {
    spec.env.emplace_back("LD_PRELOAD", preload);
    spec.env_own_pid = "HEAPLAB_CAPTURE_ROOT";  // the shim knows the program's own process by it
    spec.argv = opt.argv;
  }

  void collect(CaptureOptions& opt, CaptureResult& res, const RunInfo& run) const override {
    // A TSC rate for processes too short-lived to calibrate on their own.
    auto elapsed = std::chrono::steady_clock::now() - run.t0;
    if (elapsed < std::chrono::milliseconds(20)) std::this_thread::sleep_for(std::chrono::milliseconds(20) - elapsed);
    ClockPair c1 = clock_pair();
    const ClockPair& c0 = run.start;
    if (c1.ticks > c0.ticks)
      opt.normalise.fallback_ns_per_tick = double(c1.mono - c0.mono) / double(c1.ticks - c0.ticks);

    auto t1 = std::chrono::steady_clock::now();
    std::vector<RawName> raws = list_raw(opt.raw_dir);
    std::sort(raws.begin(), raws.end(), [&](const RawName& a, const RawName& b) {
      bool ra = a.pid == uint32_t(run.pid) && a.gen == 0, rb = b.pid == uint32_t(run.pid) && b.gen == 0;
      if (ra != rb) return ra;
      return std::tie(a.pid, a.gen) < std::tie(b.pid, b.gen);
    });
    // One trace per raw file, normalised in parallel (a `make -j` capture has
    // many), results kept in the sorted order.
    std::vector<std::optional<TraceResult>> done(raws.size());
    std::vector<std::string> errors(raws.size());
    auto normalise_one = [&](size_t i) {
      const RawName& r = raws[i];
      bool root = r.pid == uint32_t(run.pid) && r.gen == 0;
      std::string out = trace_name(opt.output, r.pid, r.gen, root);
      try {
        normalise::RawFile raw(r.path);
        TraceResult tr = normalise_to(raw, out, opt, res, root, nlohmann::json::object());
        tr.pid = r.pid;
        tr.exec_generation = r.gen;
        tr.command_line = raw.command_line();
        done[i] = std::move(tr);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    };
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i; (i = next.fetch_add(1)) < raws.size();) normalise_one(i);
    };
    size_t nthreads = std::min<size_t>(raws.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
    for (size_t i = 0; i < raws.size(); ++i) {
      if (done[i]) res.traces.push_back(std::move(*done[i]));
      if (!errors[i].empty()) res.failed.push_back(errors[i]);
    }
    res.normalise_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
};

}  // namespace

std::unique_ptr<CaptureMethod> software_method() { return std::make_unique<SoftwareMethod>(); }

}  // namespace heaplab::launch
