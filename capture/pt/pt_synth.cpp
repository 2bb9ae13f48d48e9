#include "capture/pt/pt_synth.h"

#include <intel-pt.h>

#include <stdexcept>
#include <string>

namespace heaplab::pt {

std::vector<uint8_t> encode_ptw_stream(const std::vector<PtwEvent>& events, const SynthOptions& opt) {
  // Upper bound: per event five PTW (10, + FUP 7); per PSB+
  // 16 + 8 + 2; per OVF 2.
  const size_t groups = events.size() / (opt.psb_every ? opt.psb_every : 1) + 2;
  std::vector<uint8_t> buf(events.size() * (8 + kWordsPerEvent * 17) + groups * 26 + opt.ovf_before_word.size() * 2 + 64);
  pt_config cfg;
  pt_config_init(&cfg);
  cfg.begin = buf.data();
  cfg.end = buf.data() + buf.size();
  pt_encoder* enc = pt_alloc_encoder(&cfg);
  if (!enc) throw std::runtime_error("libipt: cannot allocate an encoder");
  const auto put = [&](const pt_packet& p) {
    const int s = pt_enc_next(enc, &p);
    if (s < 0) {
      pt_free_encoder(enc);
      throw std::runtime_error(std::string("libipt: cannot encode a packet: ") + pt_errstr(pt_errcode(s)));
    }
  };
  const auto packet = [](pt_packet_type t) {
    pt_packet p{};
    p.type = t;
    p.size = 0;
    return p;
  };
  uint64_t word_index = 0;
  size_t next_ovf = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const PtwEvent& e = events[i];
    if (i % (opt.psb_every ? opt.psb_every : events.size() + 1) == 0) {
      put(packet(ppt_psb));
      pt_packet t = packet(ppt_tsc);
      t.payload.tsc.tsc = e.tsc;
      put(t);
      put(packet(ppt_psbend));
    }
    const uint64_t words[kWordsPerEvent] = {header_word(e.op, e.seq, e.tsc, e.a, e.b, e.c), e.tsc, e.a, e.b, e.c};
    for (uint64_t w : words) {
      while (next_ovf < opt.ovf_before_word.size() && opt.ovf_before_word[next_ovf] == word_index) {
        put(packet(ppt_ovf));
        ++next_ovf;
      }
      pt_packet p = packet(ppt_ptw);
      p.payload.ptw.payload = w;
      p.payload.ptw.plc = 1;
      p.payload.ptw.ip = opt.fup_on_ptw ? 1 : 0;
      put(p);
      if (opt.fup_on_ptw) {
        pt_packet f = packet(ppt_fup);
        f.payload.ip.ipc = pt_ipc_sext_48;
        f.payload.ip.ip = 0x401000 + word_index % 64;
        put(f);
      }
      ++word_index;
    }
  }
  uint64_t used = 0;
  pt_enc_get_offset(enc, &used);
  pt_free_encoder(enc);
  buf.resize(used);
  return buf;
}

}  // namespace heaplab::pt
