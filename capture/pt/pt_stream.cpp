#include "capture/pt/pt_stream.h"

#include <intel-pt.h>

#include <stdexcept>

namespace heaplab::pt {

void decode_stream(const uint8_t* data, size_t len, PtwAssembler& assembler,
                   const std::function<void(const PtwEvent&)>& sink, StreamStats& stats, uint64_t tsc0) {
  stats.bytes += len;
  if (len == 0) return;
  pt_config cfg;
  pt_config_init(&cfg);
  cfg.begin = const_cast<uint8_t*>(data);
  cfg.end = const_cast<uint8_t*>(data) + len;
  pt_packet_decoder* dec = pt_pkt_alloc_decoder(&cfg);
  if (!dec) throw std::runtime_error("libipt: cannot allocate a packet decoder");
  uint64_t tsc = tsc0;
  uint64_t at = 0;  // offset after the last packet decoded
  // Synchronises at the next PSB; returns false at the end of the data.
  const auto sync = [&]() {
    const int s = pt_pkt_sync_forward(dec);
    uint64_t off = len;
    if (s >= 0) pt_pkt_get_offset(dec, &off);
    stats.skipped_bytes += off > at ? off - at : 0;
    at = off;
    return s >= 0;
  };
  bool ok = sync();
  while (ok) {
    pt_packet pkt;
    const int s = pt_pkt_next(dec, &pkt, sizeof pkt);
    if (s == -pte_eos) break;
    if (s < 0) {
      ++stats.decode_errors;
      assembler.lost();
      ok = sync();
      continue;
    }
    at += uint64_t(s);
    ++stats.packets;
    switch (pkt.type) {
      case ppt_psb: ++stats.psb; break;
      case ppt_tsc: tsc = pkt.payload.tsc.tsc; break;
      case ppt_ovf:
        ++stats.overflows;
        assembler.lost();
        break;
      case ppt_ptw:
        ++stats.ptw;
        if (pkt.payload.ptw.plc == 1) assembler.word(pkt.payload.ptw.payload, tsc, sink);
        else assembler.short_word();
        break;
      default: break;
    }
  }
  pt_pkt_free_decoder(dec);
}

}  // namespace heaplab::pt
