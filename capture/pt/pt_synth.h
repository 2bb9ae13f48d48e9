// Synthetic Intel PT streams of heap events, encoded with libipt's packet
// encoder, for tests and benchmarks on machines without PT: PSB+ (PSB, TSC,
// PSBEND) every `psb_every` events, the five PTW packets of each event
// (ptw_format.h), and OVF packets where asked. The TSC packets carry the time
// of the next event, as a recording's would (roughly).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capture/pt/perf_data.h"
#include "capture/pt/ptw_assembler.h"

namespace heaplab::pt {

struct SynthOptions {
  uint64_t psb_every = 256;               // events between PSB+ groups
  std::vector<uint64_t> ovf_before_word;  // global payload-word indices (sorted): the PTW packet is lost,
                                          // an OVF packet stands in its place (as when the hardware overflowed)
  bool fup_on_ptw = false;                // PTW with ip=1, each followed by a FUP (fup_on_ptw=1 recordings)
};

// The events' fields are encoded as given (op, seq, a, b, c; tsc as the
// time). Throws std::runtime_error if libipt refuses a packet.
std::vector<uint8_t> encode_ptw_stream(const std::vector<PtwEvent>& events, const SynthOptions& opt = {});

// A synthetic perf.data of a per-thread Intel PT recording, in the layout
// `perf record -e intel_pt/ptw=1,branch=0/u --per-thread` writes: the attr
// (type = `pmu_type`, config pt|tsc|ptw, sample_id_all with TID|TIME|CPU|
// IDENTIFIER), a COMM per thread, AUXTRACE_INFO (with `time`), then each
// thread's PT stream in AUXTRACE records of at least `chunk_bytes`, ending
// at packet boundaries and padded to 8 bytes as perf does (round robin over
// the threads, as perf writes them when buffers fill). Pipe mode reads
// through the real `perf` (`cat f | perf script -i -`); file mode through
// heaplab only (no feature sections).
struct SynthThread {
  uint32_t pid = 0, tid = 0;
  std::string comm;
  std::vector<PtwEvent> events;
  SynthOptions stream;
  // Byte ranges [first, second) of the encoded stream left out of the file,
  // as if the AUX buffer had wrapped over them; an AUX record flagged
  // TRUNCATED marks each (perf's own sign of lost trace).
  std::vector<std::pair<uint64_t, uint64_t>> dropped;
  // Each AUXTRACE record after the first repeats this many bytes of the
  // one before (its offset that much earlier), as snapshots overlap.
  uint64_t overlap = 0;
};
struct PerfSynthOptions {
  bool pipe_mode = true;
  uint32_t pmu_type = 10;
  TimeConv time;  // AUXTRACE_INFO's conversion (enabled = cap_user_time_zero)
  uint64_t chunk_bytes = 1 << 20;
  // Per-cpu buffers (0: per-thread): thread t's events run on CPU
  // (t + seq / migrate_every) % cpus, one PT stream per CPU, and
  // SWITCH_CPU_WIDE records (switch-in, with sample_id) mark which thread
  // runs on a CPU from when: what perf records with per-cpu mmaps.
  uint32_t cpus = 0;
  uint32_t migrate_every = 100;
};
std::vector<uint8_t> synth_perf_data(const std::vector<SynthThread>& threads, const PerfSynthOptions& opt = {});

}  // namespace heaplab::pt
