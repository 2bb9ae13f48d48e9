// Decoding the ptwrite payloads out of raw Intel PT bytes (one AUX stream:
// a thread in per-thread mode, a CPU in per-cpu mode): 64-bit PTW, TSC and
// PAD packets are read directly, everything else with libipt's packet
// decoder. Branch tracing is off in heaplab's recordings, so no binary
// images are needed: only PSB (synchronisation), OVF (loss) and PTW packets
// matter (events carry their own time, ptw_format.h). Bytes
// that do not decode are skipped to the next PSB and counted, and the event
// they cut is dropped (PtwAssembler counts it). Bytes lost without a trace
// in the packets (a gap that happens to fall between packets) show only as
// a sequence gap.
// perf.data's AUX records flag such truncations, and the perf.data layer
// reports them as losses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "capture/pt/ptw_assembler.h"

namespace heaplab::pt {

struct StreamStats {
  uint64_t bytes = 0;
  uint64_t packets = 0;
  uint64_t ptw = 0;
  uint64_t psb = 0;
  uint64_t overflows = 0;      // OVF packets
  uint64_t decode_errors = 0;  // places where decoding failed and resynchronised
  uint64_t skipped_bytes = 0;  // bytes not decoded (before the first PSB, and after each error)
};

// Where decoding of one piece of a stream ended.
struct StreamEnd {
  uint64_t stopped = 0;  // offset of a packet the piece ends inside (== len if none, or not `continues`)
  bool synced = false;   // the next piece continues in sync (no PSB search needed)
};

// Decodes `len` bytes, feeding `assembler` and calling `sink` per event.
// A stream that arrives in pieces (AUXTRACE records) is decoded piece by
// piece without copying: `synced` says the piece continues a stream in
// sync (else decoding starts at the first PSB or PTW pair), `continues`
// that more follows, so a packet cut at the end is left for the caller to
// join with the next piece (StreamEnd::stopped). Throws std::runtime_error
// only if libipt cannot be set up.
StreamEnd decode_stream(const uint8_t* data, size_t len, PtwAssembler& assembler,
                        const std::function<void(const PtwEvent&)>& sink, StreamStats& stats, bool synced = false,
                        bool continues = false);

}  // namespace heaplab::pt
