// A stand-in for `perf` on machines without Intel PT, for testing
// `heaplab capture --method pt` end to end (capture_test):
//
//   pt_fake_perf version            exits 0
//   pt_fake_perf record -o OUT ... -- PROGRAM ARGS
//                                   writes its arguments to OUT.argv, runs the
//                                   program with the shim's ptwrite sink falling
//                                   back to files (this CPU has no ptwrite),
//                                   turns each thread's records into the PT
//                                   stream the ptwrite sink would have produced
//                                   (pt_synth: one AUX buffer per thread, as
//                                   perf --per-thread writes), replaces the raw
//                                   files by the sink's markers (PID.0.ptw),
//                                   and exits with the program's status
//   pt_fake_perf script ...         runs the real perf (/usr/bin/perf)
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "capture/normalise/raw_reader.h"
#include "capture/pt/pt_synth.h"
#include "common/process.h"

namespace fs = std::filesystem;
using namespace heaplab;

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "version") == 0) return 0;
  if (argc >= 2 && std::strcmp(argv[1], "script") == 0) {
    argv[0] = const_cast<char*>("/usr/bin/perf");
    execv(argv[0], argv);
    perror("/usr/bin/perf");
    return 127;
  }
  if (argc < 2 || std::strcmp(argv[1], "record") != 0) {
    std::fprintf(stderr, "pt_fake_perf: only version, record and script\n");
    return 2;
  }
  std::string out;
  int dashes = -1;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[i + 1];
    if (std::strcmp(argv[i], "--") == 0) {
      dashes = i;
      break;
    }
  }
  if (out.empty() || dashes < 0) {
    std::fprintf(stderr, "pt_fake_perf: record needs -o FILE and -- PROGRAM\n");
    return 2;
  }
  {
    std::ofstream a(out + ".argv");
    for (int i = 0; i < argc; ++i) a << argv[i] << "\n";
  }
  const char* dir = getenv("HEAPLAB_CAPTURE_DIR");
  if (!dir) {
    std::fprintf(stderr, "pt_fake_perf: HEAPLAB_CAPTURE_DIR is not set\n");
    return 2;
  }
  process::Spec spec;
  spec.argv.assign(argv + dashes + 1, argv + argc);
  spec.env = {{"HEAPLAB_CAPTURE_NO_PTWRITE", "fallback"}};
  int status = 0;
  try {
    status = process::spawn(spec).wait();
  } catch (const process::SpawnError& e) {
    std::fprintf(stderr, "pt_fake_perf: %s\n", e.what());
    return 127;
  }
  std::vector<pt::SynthThread> threads;
  std::vector<std::pair<std::string, uint32_t>> markers;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".hlraw") continue;
    normalise::RawFile raw(e.path().string());
    for (const normalise::RawThread& t : raw.threads()) {
      pt::SynthThread st;
      st.pid = raw.header().pid;
      st.tid = uint32_t(t.tid);
      st.comm = t.name;
      st.stream.psb_every = 64;
      normalise::RawThreadCursor c(raw, t);
      for (const raw::Record* r; (r = c.next());) {
        pt::PtwEvent ev;
        ev.op = raw::record_op(r->head);
        ev.seq = uint32_t(st.events.size());
        ev.tsc = raw::record_ticks(r->head);
        ev.a = r->a;
        ev.b = r->b;
        ev.c = r->c;
        st.events.push_back(ev);
      }
      threads.push_back(std::move(st));
    }
    markers.emplace_back(std::string(dir) + "/" + std::to_string(raw.header().pid) + ".0.ptw", raw.header().ppid);
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".hlraw" || e.path().extension() == ".blocks") fs::remove(e.path());
  for (const auto& [m, ppid] : markers) std::ofstream{m} << ppid << "\n";  // as the shim: the parent's pid
  pt::PerfSynthOptions o;
  o.pipe_mode = true;  // what the real perf reads back (dlfilter and text decoders)
  o.chunk_bytes = 1 << 16;
  const std::vector<uint8_t> bytes = pt::synth_perf_data(threads, o);
  std::ofstream f(out, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  f.close();
  if (WIFSIGNALED(status)) {  // as perf does: die of the program's signal
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(WTERMSIG(status), SIG_DFL);
    raise(WTERMSIG(status));
  }
  return WEXITSTATUS(status);
}
