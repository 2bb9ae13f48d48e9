#include "capture/pt/pt_synth.h"

#include <intel-pt.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace heaplab::pt {

std::vector<uint8_t> encode_ptw_stream(const std::vector<PtwEvent>& events, const SynthOptions& opt) {
  // Upper bound: per event five PTW (10, + FUP 7); per PSB+
  // 16 + 8 + 2; per OVF 2.
  const size_t groups = events.size() / (opt.psb_every ? opt.psb_every : 1) + 2;
  std::vector<uint8_t> buf(events.size() * (8 + kWordsPerEvent * 17) + groups * 26 + opt.ovf_before_word.size() * 2 +
                           64);
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
      bool overflowed = false;
      while (next_ovf < opt.ovf_before_word.size() && opt.ovf_before_word[next_ovf] == word_index) {
        overflowed = true;
        ++next_ovf;
      }
      if (overflowed) {
        put(packet(ppt_ovf));
        ++word_index;
        continue;
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

namespace heaplab::pt {

namespace {

struct Out {
  std::vector<uint8_t> b;
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  void bytes(const void* p, size_t n) {
    const auto* q = static_cast<const uint8_t*>(p);
    b.insert(b.end(), q, q + n);
  }
  // A record: header, body, then the sample_id trailer (TID, TIME, CPU, IDENTIFIER).
  void record(uint32_t type, uint16_t misc, const std::vector<uint8_t>& body, bool with_id, uint32_t pid, uint32_t tid,
              uint64_t time, uint32_t cpu = ~0u) {
    perf_event_header h{type, misc, uint16_t(sizeof h + body.size() + (with_id ? 32 : 0))};
    put(h);
    bytes(body.data(), body.size());
    if (with_id) {
      put(pid);
      put(tid);
      put(time);
      put(cpu);  // -1: per-thread buffers
      put(uint32_t(0));
      put(uint64_t(1));  // the attr's id
    }
  }
};

// Piece boundaries in [from, to) of an encoded stream: at least
// `chunk_bytes` each, ending before a PSB (perf reads the AUX buffer when
// the hardware has flushed whole packets, so records end at packet
// boundaries), the last one at `to`.
std::vector<std::pair<uint64_t, uint64_t>> pieces_of(const std::vector<uint8_t>& s, uint64_t from, uint64_t to,
                                                     uint64_t chunk_bytes) {
  static const uint8_t kPsb[4] = {2, 0x82, 2, 0x82};
  std::vector<std::pair<uint64_t, uint64_t>> out;
  uint64_t p = from;
  while (p < to) {
    uint64_t q = to;
    for (uint64_t k = p + std::max<uint64_t>(chunk_bytes, 1); k + 4 <= to; ++k)
      if (std::memcmp(s.data() + k, kPsb, 4) == 0) {
        q = k;
        break;
      }
    out.emplace_back(p, q);
    p = q;
  }
  return out;
}

template <class T>
void append(std::vector<uint8_t>& v, const T& x) {
  const auto* p = reinterpret_cast<const uint8_t*>(&x);
  v.insert(v.end(), p, p + sizeof x);
}

}  // namespace

std::vector<uint8_t> synth_perf_data(const std::vector<SynthThread>& threads, const PerfSynthOptions& opt) {
  perf_event_attr attr{};
  attr.type = opt.pmu_type;
  attr.size = PERF_ATTR_SIZE_VER7;
  attr.config = 1u | 1u << 10 | 1u << 12;  // pt, tsc, ptw
  attr.sample_period = 1;
  attr.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER;
  attr.sample_id_all = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  attr.comm = 1;
  attr.task = 1;
  attr.context_switch = opt.cpus ? 1 : 0;

  Out o;
  const uint64_t kHeaderSize = 104;
  if (opt.pipe_mode) {
    o.bytes("PERFILE2", 8);
    o.put(uint64_t{16});
    std::vector<uint8_t> body;
    append(body, attr);
    append(body, uint64_t{1});
    o.record(kRecordHeaderAttr, 0, body, false, 0, 0, 0);
  } else {
    o.b.resize(kHeaderSize);  // filled in at the end
    o.put(attr);
    o.put(uint64_t(kHeaderSize + sizeof attr + 16));  // ids section: right after the attr
    o.put(uint64_t{8});
    o.put(uint64_t{1});
  }
  const uint64_t data_start = o.b.size();
  // File mode: the header, once the data section's size is known.
  const auto finish = [&]() {
    if (!opt.pipe_mode) {
      uint8_t* h = o.b.data();
      std::memcpy(h, "PERFILE2", 8);  // NOLINT(bugprone-not-null-terminated-result): an 8-byte magic, no NUL
      const uint64_t fields[] = {kHeaderSize, sizeof attr + 16,        kHeaderSize, sizeof attr + 16,
                                 data_start,  o.b.size() - data_start, 0,           0};
      std::memcpy(h + 8, fields, sizeof fields);
    }
    return o.b;
  };

  uint64_t t0 = ~uint64_t{0};
  for (const SynthThread& t : threads)
    if (!t.events.empty()) t0 = std::min(t0, opt.time.to_perf(t.events.front().tsc));
  if (t0 == ~uint64_t{0}) t0 = 0;
  for (const SynthThread& t : threads) {
    std::vector<uint8_t> body;
    append(body, t.pid);
    append(body, t.tid);
    char name[16] = {};
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result): name[15] stays 0
    std::memcpy(name, t.comm.data(), std::min<size_t>(t.comm.size(), 15));
    body.insert(body.end(), name, name + 16);
    o.record(PERF_RECORD_COMM, 0, body, true, t.pid, t.tid, t0);
  }
  {
    std::vector<uint8_t> body;
    append(body, kAuxtraceIntelPt);
    append(body, uint32_t{0});
    uint64_t priv[16] = {};
    priv[kPrivPmuType] = opt.pmu_type;
    priv[kPrivTimeShift] = opt.time.shift;
    priv[kPrivTimeMult] = opt.time.mult;
    priv[kPrivTimeZero] = opt.time.zero;
    priv[kPrivCapUserTimeZero] = opt.time.enabled;
    priv[kPrivTscBit] = 1u << 10;  // perf stores the config bits as masks
    priv[kPrivNoretcompBit] = 1u << 11;
    priv[kPrivSnapshotMode] = 0;
    priv[kPrivPerCpuMmaps] = opt.cpus ? 1 : 0;
    priv[kPrivHaveSchedSwitch] = opt.cpus ? 2 : 0;  // 2: switches from the attr's context_switch flag
    priv[10] = 1u << 9;                             // mtc bit
    priv[11] = 0;                                   // mtc freq bits
    priv[12] = 2;                                   // TSC:CTC ratio
    priv[13] = 1;
    priv[14] = 1u << 1;  // cyc bit
    priv[15] = 0;        // max non-turbo ratio
    body.insert(body.end(), reinterpret_cast<uint8_t*>(priv), reinterpret_cast<uint8_t*>(priv) + sizeof priv);
    o.record(kRecordAuxtraceInfo, 0, body, false, 0, 0, 0);
  }
  if (opt.cpus) {
    // Every event in time order, each on its CPU; a switch-in record
    // wherever a CPU's thread changes (midway between the two events).
    struct At {
      uint64_t tsc;
      uint32_t thread;
      size_t index;
    };
    std::vector<At> all;
    for (uint32_t t = 0; t < threads.size(); ++t)
      for (size_t i = 0; i < threads[t].events.size(); ++i) all.push_back({threads[t].events[i].tsc, t, i});
    std::stable_sort(all.begin(), all.end(), [](const At& x, const At& y) { return x.tsc < y.tsc; });
    std::vector<std::vector<PtwEvent>> per_cpu(opt.cpus);
    std::vector<int64_t> running(opt.cpus, -1);
    std::vector<uint64_t> last_tsc(opt.cpus, 0);
    for (const At& a : all) {
      const PtwEvent& e = threads[a.thread].events[a.index];
      const uint32_t cpu = uint32_t((a.thread + e.seq / std::max<uint32_t>(opt.migrate_every, 1)) % opt.cpus);
      if (running[cpu] != int64_t(a.thread)) {
        const uint64_t at = running[cpu] < 0 ? e.tsc - 1 : last_tsc[cpu] + (e.tsc - last_tsc[cpu]) / 2;
        std::vector<uint8_t> body;
        append(body, uint32_t(running[cpu] < 0 ? 0 : threads[size_t(running[cpu])].pid));  // prev pid/tid
        append(body, uint32_t(running[cpu] < 0 ? 0 : threads[size_t(running[cpu])].tid));
        o.record(PERF_RECORD_SWITCH_CPU_WIDE, 0, body, true, threads[a.thread].pid, threads[a.thread].tid,
                 opt.time.to_perf(at), cpu);
        running[cpu] = a.thread;
      }
      last_tsc[cpu] = e.tsc;
      per_cpu[cpu].push_back(e);
    }
    uint64_t reference = 1;
    for (uint32_t cpu = 0; cpu < opt.cpus; ++cpu) {
      SynthOptions so;
      so.psb_every = threads.empty() ? 256 : threads[0].stream.psb_every;
      const std::vector<uint8_t> s = encode_ptw_stream(per_cpu[cpu], so);
      for (auto [p, q] : pieces_of(s, 0, s.size(), opt.chunk_bytes)) {
        const uint64_t n = q - p;
        const uint64_t padded = (n + 7) & ~uint64_t{7};
        std::vector<uint8_t> body;
        append(body, padded);
        append(body, p);
        append(body, reference++);
        append(body, cpu);            // idx
        append(body, uint32_t(~0u));  // tid: per-cpu
        append(body, int32_t(cpu));
        append(body, uint32_t{0});
        o.record(kRecordAuxtrace, 0, body, false, 0, 0, 0);
        o.bytes(s.data() + p, n);
        o.b.resize(o.b.size() + (padded - n), 0);
      }
    }
    return finish();
  }
  // Each thread's stream, with the dropped ranges cut out: the AUX offsets
  // jump over them, as they do when the kernel lost data.
  // Each thread's stream in pieces. A dropped range is left out the way
  // the kernel loses AUX data when the buffer is full: the offsets go on
  // without a jump, and an AUX record flagged TRUNCATED covers the data
  // written before the loss (aux_offset + aux_size = where it stopped).
  struct Piece {
    uint64_t offset;  // in the AUX buffer's offsets
    const uint8_t* data;
    uint64_t size;
    bool after_loss;
  };
  std::vector<std::vector<uint8_t>> streams;
  std::vector<std::vector<Piece>> pieces(threads.size());
  for (size_t i = 0; i < threads.size(); ++i) {
    streams.push_back(encode_ptw_stream(threads[i].events, threads[i].stream));
    const std::vector<uint8_t>& s = streams.back();
    uint64_t at = 0, shift = 0;  // bytes dropped so far
    bool loss = false;
    auto drops = threads[i].dropped;
    drops.emplace_back(s.size(), s.size());
    for (auto [from, to] : drops) {
      from = std::min<uint64_t>(from, s.size());
      to = std::min<uint64_t>(std::max(to, from), s.size());
      for (auto [p, q] : pieces_of(s, at, from, opt.chunk_bytes)) {
        const uint64_t back =
            pieces[i].empty() || loss ? 0 : std::min(threads[i].overlap, p - shift - pieces[i].back().offset);
        pieces[i].push_back({p - shift - back, s.data() + p - back, q - p + back, loss});
        loss = false;
      }
      shift += to - from;
      loss = to > from;
      at = to;
    }
  }
  uint64_t reference = 1;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (size_t i = 0; i < threads.size(); ++i) {
      if (round >= pieces[i].size()) continue;
      any = true;
      const Piece& p = pieces[i][round];
      if (p.after_loss && round) {  // the data before this piece stopped short: an AUX record says so
        const Piece& before = pieces[i][round - 1];
        std::vector<uint8_t> body;
        append(body, before.offset);
        append(body, before.size);
        append(body, uint64_t{PERF_AUX_FLAG_TRUNCATED});
        o.record(PERF_RECORD_AUX, 0, body, true, threads[i].pid, threads[i].tid, t0);
      }
      // perf pads each payload to 8 bytes and counts the padding in
      // `size`, while the next record's offset continues from the
      // unpadded end (perf's __auxtrace_mmap__read).
      const uint64_t padded = (p.size + 7) & ~uint64_t{7};
      std::vector<uint8_t> body;
      append(body, padded);
      append(body, p.offset);
      append(body, reference++);
      append(body, uint32_t(i));  // idx
      append(body, threads[i].tid);
      append(body, int32_t{-1});  // cpu
      append(body, uint32_t{0});
      o.record(kRecordAuxtrace, 0, body, false, 0, 0, 0);
      o.bytes(p.data, p.size);
      o.b.resize(o.b.size() + (padded - p.size), 0);
    }
    if (!any) break;
  }
  return finish();
}

}  // namespace heaplab::pt
