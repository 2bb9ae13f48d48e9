#include "capture/pt/pt_stream.h"

#include <intel-pt.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace heaplab::pt {

StreamEnd decode_stream(const uint8_t* data, size_t len, PtwAssembler& assembler,
                        const std::function<void(const PtwEvent&)>& sink, StreamStats& stats, bool synced,
                        bool continues) {
  StreamEnd end;
  end.stopped = len;
  end.synced = synced;
  if (len == 0) return end;
  pt_config cfg;
  pt_config_init(&cfg);
  cfg.begin = const_cast<uint8_t*>(data);
  cfg.end = const_cast<uint8_t*>(data) + len;
  // Freed however the decoding ends (the sink may throw: a memory check).
  const std::unique_ptr<pt_packet_decoder, void (*)(pt_packet_decoder*)> owner(pt_pkt_alloc_decoder(&cfg),
                                                                               pt_pkt_free_decoder);
  pt_packet_decoder* dec = owner.get();
  if (!dec) throw std::runtime_error("libipt: cannot allocate a packet decoder");
  uint64_t pos = 0;  // the next packet's offset
  // Synchronises at the next PSB, or PTW pair, at or after `pos`; false at
  // the end. (libipt's sync_forward looks past a PSB right at the position.)
  static const uint8_t kPsb[16] = {2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82};
  const auto is_ptw64 = [&](uint64_t at) {
    return at + 10 <= len && data[at] == 0x02 && (data[at + 1] == 0x32 || data[at + 1] == 0xB2);
  };
  // Two 64-bit PTW packets in a row (or one that ends the data, or is
  // followed by a PSB): a place to pick up ptwrite payloads after a loss
  // without waiting for the next PSB, which may be thousands of events on.
  // A wrong pick (payload bytes that look like it) costs nothing: the
  // events' check bytes reject what it yields, and decoding moves on.
  const auto ptw_pair_at = [&](uint64_t at) {
    if (!is_ptw64(at)) return false;
    const uint64_t n = at + 10;
    return n == len || is_ptw64(n) || (n + 2 <= len && data[n] == 0x02 && data[n + 1] == 0x82);
  };
  const auto sync = [&]() {
    if (pos + sizeof kPsb <= len && std::memcmp(data + pos, kPsb, sizeof kPsb) == 0) return true;
    int st = pt_pkt_sync_set(dec, pos);
    if (st >= 0) st = pt_pkt_sync_forward(dec);
    uint64_t off = len;
    if (st >= 0) pt_pkt_get_offset(dec, &off);
    // A PTW pair before that PSB?
    for (const uint8_t* p = data + pos; p < data + off;) {
      p = static_cast<const uint8_t*>(std::memchr(p, 0x02, size_t(data + off - p)));
      if (!p) break;
      if (ptw_pair_at(uint64_t(p - data))) {
        off = uint64_t(p - data);
        st = 0;
        break;
      }
      ++p;
    }
    off = std::max(off, pos);  // libipt may report a PSB that began before `pos`: never go back
    stats.skipped_bytes += off - pos;
    pos = off;
    return st >= 0;
  };
  const auto le = [&](uint64_t at, unsigned n) {
    uint64_t v = 0;
    std::memcpy(&v, data + at, n);  // little-endian machine (x86)
    return v;
  };
  // The packets of a ptwrite recording are read here directly: 64-bit PTW
  // (02 32, or 02 B2 when a FUP follows: 10 bytes), TSC (19 + 7 bytes) and
  // PAD (00). Everything else, and anything that does not fit, goes through
  // libipt from the same offset.
  bool ok = synced || sync();
  while (ok && pos < len) {
    const uint8_t b0 = data[pos];
    // A packet that may continue in the next piece: left for the caller.
    if (continues && len - pos < 16 && (b0 != 0x00)) {
      const uint64_t need = b0 == 0x02 && pos + 1 < len && (data[pos + 1] == 0x32 || data[pos + 1] == 0xB2) ? 10
                            : b0 == 0x19                                                                    ? 8
                            : b0 == 0x02 && pos + 1 < len && data[pos + 1] == 0xF3                          ? 2
                                                                                                            : 16;
      if (pos + need > len) {
        end.stopped = pos;
        break;
      }
    }
    if (is_ptw64(pos)) {
      ++stats.packets;
      ++stats.ptw;
      assembler.word(le(pos + 2, 8), sink);
      pos += 10;
      continue;
    }
    if (b0 == 0x19 && pos + 8 <= len) {  // TSC: events carry their own
      ++stats.packets;
      pos += 8;
      continue;
    }
    if (b0 == 0x00) {
      ++stats.packets;
      ++pos;
      continue;
    }
    pt_packet pkt;
    int st = pt_pkt_sync_set(dec, pos);
    if (st >= 0) st = pt_pkt_next(dec, &pkt, sizeof pkt);
    if (st == -pte_eos) {
      if (continues)
        end.stopped = pos;
      else
        stats.skipped_bytes += len - pos;
      pos = len;
      break;
    }
    if (st < 0) {
      ++stats.decode_errors;
      assembler.lost();
      ++pos;  // past the byte that does not decode, then to the next PSB or PTW pair
      ++stats.skipped_bytes;
      ok = sync();
      continue;
    }
    pos += uint64_t(st);
    ++stats.packets;
    switch (pkt.type) {
      case ppt_psb:
        ++stats.psb;
        break;
      case ppt_ovf:
        ++stats.overflows;
        assembler.lost();
        break;
      case ppt_ptw:
        ++stats.ptw;
        if (pkt.payload.ptw.plc == 1)
          assembler.word(pkt.payload.ptw.payload, sink);
        else
          assembler.short_word();
        break;
      default:
        break;
    }
  }
  stats.bytes += end.stopped;
  end.synced = ok && pos >= end.stopped;
  return end;
}

}  // namespace heaplab::pt
