// Synthetic Intel PT streams of heap events, encoded with libipt's packet
// encoder, for tests and benchmarks on machines without PT: PSB+ (PSB, TSC,
// PSBEND) every `psb_every` events, the five PTW packets of each event
// (ptw_format.h), and OVF packets where asked. The TSC packets carry the time
// of the next event, as a recording's would (roughly).
#pragma once

#include <cstdint>
#include <vector>

#include "capture/pt/ptw_assembler.h"

namespace heaplab::pt {

struct SynthOptions {
  uint64_t psb_every = 256;               // events between PSB+ groups
  std::vector<uint64_t> ovf_before_word;  // global payload-word indices (sorted) preceded by an OVF packet
  bool fup_on_ptw = false;                // PTW with ip=1, each followed by a FUP (fup_on_ptw=1 recordings)
};

// The events' fields are encoded as given (op, seq, a, b, c; tsc as the
// time). Throws std::runtime_error if libipt refuses a packet.
std::vector<uint8_t> encode_ptw_stream(const std::vector<PtwEvent>& events, const SynthOptions& opt = {});

}  // namespace heaplab::pt
