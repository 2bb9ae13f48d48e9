#include "analysis/perfetto.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "analysis/perfetto_trace.pb.h"
#include "common/json.h"

namespace heaplab::analysis {

namespace pp = perfetto::protos;

namespace {

// Track uuids: the trace's process, its counters, its threads; each
// result's process and counters in a block of its own.
constexpr uint64_t kProcessTrack = 1, kLiveBytesTrack = 2, kLiveObjectsTrack = 3;
constexpr uint64_t kThreadTrackBase = uint64_t{1} << 32;
constexpr uint64_t kResultTrackBase = uint64_t{1} << 40, kResultTrackStride = uint64_t{1} << 20;
constexpr uint32_t kSequence = 1;
// Pids and tids no real process has (Linux's are below 2^22): the replays'
// processes, and threads the trace knows no OS tid of.
constexpr int32_t kReplayPid = 1 << 30, kUnknownTid = 1 << 29;

// Packets as Trace's repeated field 1, one at a time (a Trace never held
// whole in memory).
class PacketWriter {
 public:
  explicit PacketWriter(std::ostream& out) : raw_(&out), coded_(&raw_) {}
  void write(pp::TracePacket& p) {
    p.set_trusted_packet_sequence_id(kSequence);
    if (first_) {
      p.set_sequence_flags(pp::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
      first_ = false;
    } else if (p.has_track_event()) {
      p.set_sequence_flags(pp::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
    }
    coded_.WriteTag(1 << 3 | 2);  // Trace.packet: field 1, length-delimited
    coded_.WriteVarint32(uint32_t(p.ByteSizeLong()));
    p.SerializeWithCachedSizes(&coded_);
    ++packets;
  }
  void finish() { coded_.Trim(); }
  uint64_t packets = 0;

 private:
  google::protobuf::io::OstreamOutputStream raw_;
  google::protobuf::io::CodedOutputStream coded_;
  bool first_ = true;
};

void process_track(PacketWriter& w, uint64_t uuid, int32_t pid, const std::string& name) {
  pp::TracePacket p;
  pp::TrackDescriptor* d = p.mutable_track_descriptor();
  d->set_uuid(uuid);
  d->mutable_process()->set_pid(pid);
  d->mutable_process()->set_process_name(name);
  w.write(p);
}

void counter_track(PacketWriter& w, uint64_t uuid, uint64_t parent, const std::string& name,
                   pp::CounterDescriptor::Unit unit, const std::string& unit_name = "") {
  pp::TracePacket p;
  pp::TrackDescriptor* d = p.mutable_track_descriptor();
  d->set_uuid(uuid);
  d->set_parent_uuid(parent);
  d->set_name(name);
  d->mutable_counter()->set_unit(unit);
  if (!unit_name.empty()) d->mutable_counter()->set_unit_name(unit_name);
  w.write(p);
}

void counter(PacketWriter& w, uint64_t uuid, uint64_t ts, double value) {
  pp::TracePacket p;
  p.set_timestamp(ts);
  pp::TrackEvent* e = p.mutable_track_event();
  e->set_type(pp::TrackEvent::TYPE_COUNTER);
  e->set_track_uuid(uuid);
  if (value == std::floor(value) && std::fabs(value) < 9e18)
    e->set_counter_value(int64_t(value));
  else
    e->set_double_counter_value(value);
  w.write(p);
}

void annotate(pp::TrackEvent* e, const char* name, uint64_t v) {
  pp::DebugAnnotation* a = e->add_debug_annotations();
  a->set_name(name);
  a->set_uint_value(v);
}

[[noreturn]] void not_a_result(const PerfettoResult& r, const std::string& why) {
  throw std::runtime_error(r.source + ": not a replay result: " + why);
}

const nlohmann::json& member(const PerfettoResult& r, const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) not_a_result(r, std::string("no \"") + key + "\"");
  return j[key];
}

// What a result needs: its replay's memory timeline (not there when the
// replay failed, or ran with --no-memory).
void check_result(const PerfettoResult& res) {
  const nlohmann::json& j = res.result;
  if (j.is_object() && j.contains("exit") && !j.contains("replay"))
    not_a_result(res, "the replay failed (" + j["exit"].dump() + "), so it has no figures");
  member(res, j, "allocator");
  const nlohmann::json& replay = member(res, j, "replay");
  if (!replay.contains("memory") || !replay["memory"].is_object() || !replay["memory"].contains("timeline"))
    not_a_result(res, "no memory timeline (replayed with --no-memory?)");
  const nlohmann::json& t_ms = member(res, replay["memory"]["timeline"], "t_ms");
  if (!t_ms.is_array() || t_ms.empty()) not_a_result(res, "an empty memory timeline");
}

// One replay's counters, on its own clock.
uint64_t write_result(PacketWriter& w, const PerfettoResult& res, uint64_t k) {
  const nlohmann::json& j = res.result;
  const nlohmann::json& replay = j["replay"];
  const nlohmann::json& alloc = j["allocator"];
  const nlohmann::json& memory = replay["memory"];
  const nlohmann::json& tl = memory["timeline"];
  const nlohmann::json& t_ms = tl["t_ms"];
  const uint64_t base = kResultTrackBase + k * kResultTrackStride;
  const std::string name =
      "replay on " + alloc.value("name", std::string("?")) + " (" + alloc.value("load", std::string("?")) + ")";
  process_track(w, base, int32_t(kReplayPid + k), name);
  uint64_t points = 0;
  struct Series {
    const char* key;
    const char* name;
    double scale;
  };
  const Series series[] = {{"heap_kib", "heap RSS", 1024},
                           {"rss_kib", "RSS", 1024},
                           {"anon_kib", "anonymous memory", 1024},
                           {"live_bytes", "live bytes (requested)", 1}};
  uint64_t uuid = base + 1;
  const auto ts_of = [&](size_t i) {
    const double ms = t_ms[i].is_number() ? t_ms[i].get<double>() : 0;
    return uint64_t(std::llround(std::clamp(ms, 0.0, 1e12) * 1e6));  // (a million seconds at most)
  };
  for (const Series& s : series) {
    if (!tl.contains(s.key) || !tl[s.key].is_array()) continue;
    const nlohmann::json& v = tl[s.key];
    counter_track(w, uuid, base, name + ": " + s.name, pp::CounterDescriptor::UNIT_SIZE_BYTES);
    for (size_t i = 0; i < v.size() && i < t_ms.size(); ++i) {
      if (!v[i].is_number()) continue;
      counter(w, uuid, ts_of(i), v[i].get<double>() * s.scale);
      ++points;
    }
    ++uuid;
  }
  const uint64_t end = ts_of(t_ms.size() - 1);
  // Page footprint (mincore): at the live peak (placed where the sampled
  // live bytes peak) and at the end.
  if (memory.contains("footprint") && memory["footprint"].is_object()) {
    const nlohmann::json& f = memory["footprint"];
    const double page = f.value("page_size", 4096.0);
    counter_track(w, uuid, base, name + ": page footprint", pp::CounterDescriptor::UNIT_SIZE_BYTES);
    uint64_t peak_ts = 0;
    if (tl.contains("live_bytes") && tl["live_bytes"].is_array()) {
      double best = -1;
      for (size_t i = 0; i < tl["live_bytes"].size() && i < t_ms.size(); ++i)
        if (tl["live_bytes"][i].is_number() && tl["live_bytes"][i].get<double>() > best) {
          best = tl["live_bytes"][i].get<double>();
          peak_ts = ts_of(i);
        }
    }
    for (const auto& [key, ts] : {std::pair{"at_live_peak", peak_ts}, {"at_end", end}}) {
      if (f.contains(key) && f[key].is_object() && f[key].contains("pages") && f[key]["pages"].is_number()) {
        counter(w, uuid, ts, f[key]["pages"].get<double>() * page);
        ++points;
      }
    }
    ++uuid;
  }
  // Latency per op: its percentiles as flat counters over the replay.
  if (replay.contains("latency") && replay["latency"].is_object() && replay["latency"].contains("ops") &&
      replay["latency"]["ops"].is_object()) {
    for (const auto& [op, o] : replay["latency"]["ops"].items()) {
      for (const char* q : {"p50_ns", "p99_ns", "p99.9_ns"}) {
        if (!o.contains(q) || !o[q].is_number()) continue;
        counter_track(w, uuid, base,
                      name + ": " + op + " latency " + std::string(q).substr(0, std::string(q).size() - 3),
                      pp::CounterDescriptor::UNIT_TIME_NS);
        counter(w, uuid, 0, o[q].get<double>());
        counter(w, uuid, end, o[q].get<double>());
        points += 2;
        ++uuid;
      }
    }
  }
  return points;
}

}  // namespace

PerfettoSummary write_perfetto(const trace::TraceReader& r, const std::vector<PerfettoResult>& results,
                               std::ostream& out, const PerfettoOptions& opt) {
  PerfettoSummary s;
  for (const PerfettoResult& res : results) check_result(res);
  PacketWriter w(out);
  const nlohmann::json meta = common::parse_bounded_json(r.metadata());
  int32_t pid = 1;
  if (meta.is_object() && meta.contains("capture") && meta["capture"].is_object() && meta["capture"].contains("pid") &&
      meta["capture"]["pid"].is_number_integer())
    pid = meta["capture"]["pid"].get<int32_t>();
  std::string name = r.name();
  if (const size_t slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  process_track(w, kProcessTrack, pid,
                "heaplab: " + name + (r.has_time() ? "" : " (no clock: calls 1 us apart, in order)"));
  counter_track(w, kLiveBytesTrack, kProcessTrack, "live bytes", pp::CounterDescriptor::UNIT_SIZE_BYTES);
  counter_track(w, kLiveObjectsTrack, kProcessTrack, "live objects", pp::CounterDescriptor::UNIT_COUNT);
  for (uint32_t t : r.active_threads()) {
    const trace::ThreadInfo& info = r.thread_info(t);
    pp::TracePacket p;
    pp::TrackDescriptor* d = p.mutable_track_descriptor();
    d->set_uuid(kThreadTrackBase + t);
    d->mutable_thread()->set_pid(pid);
    d->mutable_thread()->set_tid(info.os_tid ? int64_t(info.os_tid) : int64_t(kUnknownTid) + int64_t(t));
    d->mutable_thread()->set_thread_name(info.name.empty() ? "thread " + std::to_string(t) : info.name);
    w.write(p);
  }

  trace::MergedCursor cur(r);
  trace::AddressCursor addresses(r);
  const bool has_addresses = r.has_addresses();
  std::unordered_map<uint64_t, uint64_t> live;  // id -> requested bytes
  uint64_t live_bytes = 0;
  const uint64_t stride = std::max<uint64_t>(1, r.event_count() / std::max<uint64_t>(1, opt.max_counter_points));
  uint64_t since = 0, last_ts = 0;
  bool pending = false;
  std::vector<trace::Event> buf(4096);
  pp::TracePacket p;
  bool done = false;
  while (size_t n = done ? 0 : cur.next(buf.data(), buf.size())) {
    for (size_t i = 0; i < n; ++i) {
      const trace::Event& e = buf[i];
      if (s.calls >= opt.limit) {  // (the counters end where the calls do)
        done = true;
        break;
      }
      bool changed = false;
      if (trace::op_consumes(e.op) && e.old != 0 && !(e.flags & trace::kFailed)) {
        if (auto it = live.find(e.old); it != live.end()) {
          live_bytes -= it->second;
          live.erase(it);
          changed = true;
        }
      }
      if (trace::op_produces(e.op) && e.id != 0 && !(e.flags & trace::kNullResult)) {
        live[e.id] = e.requested_bytes();
        live_bytes += e.requested_bytes();
        changed = true;
      }
      if (e.seq < opt.from) continue;
      const uint64_t ts = r.has_time() ? e.time : e.seq * 1000;
      last_ts = ts;
      p.Clear();
      p.set_timestamp(ts);
      pp::TrackEvent* te = p.mutable_track_event();
      te->set_type(pp::TrackEvent::TYPE_INSTANT);
      te->set_track_uuid(kThreadTrackBase + e.thread);
      te->set_name(std::string(trace::op_name(e.op)) + ((e.flags & trace::kFailed) ? " (failed)" : ""));
      const uint8_t f = trace::op_info(e.op).fields;
      if (f & trace::kSize) annotate(te, "size", e.size);
      if (f & trace::kCount) annotate(te, "count", e.count);
      if (f & trace::kAlign) annotate(te, "align", e.align);
      if (f & trace::kConsumes) annotate(te, "old object", e.old);
      if ((f & trace::kProduces) && e.id) annotate(te, "object", e.id);
      if (has_addresses) {
        if (const uint64_t a = addresses.at(e.seq)) {
          pp::DebugAnnotation* an = te->add_debug_annotations();
          an->set_name("address");
          an->set_pointer_value(a);
        }
      }
      w.write(p);
      ++s.calls;
      pending |= changed;
      if (pending && ++since >= stride) {
        counter(w, kLiveBytesTrack, ts, double(live_bytes));
        counter(w, kLiveObjectsTrack, ts, double(live.size()));
        s.counter_points += 2;
        since = 0;
        pending = false;
      }
    }
  }
  if (pending) {
    counter(w, kLiveBytesTrack, last_ts, double(live_bytes));
    counter(w, kLiveObjectsTrack, last_ts, double(live.size()));
    s.counter_points += 2;
  }
  for (size_t k = 0; k < results.size(); ++k) {
    try {
      s.counter_points += write_result(w, results[k], k);
    } catch (const nlohmann::json::exception& e) {  // a value of the wrong type
      not_a_result(results[k], e.what());
    }
    ++s.results;
  }
  w.finish();
  s.packets = w.packets;
  return s;
}

}  // namespace heaplab::analysis
