#include "analysis/trace_stats.h"
#include "common/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "capture/format/id_map.h"
#include "common/capture_meta.h"
#include "common/text.h"
#include "common/json.h"

namespace heaplab::analysis {
namespace {

using common::group_digits;
using trace::Event;
using trace::Op;

struct Obj {
  uint64_t seq;
  uint64_t time;
  uint64_t bytes;
  uint32_t thread;
};

uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

// The live byte sum is kept exactly (it can exceed 2^64 with huge requests)
// and reported saturated: a saturating running sum would go wrong as soon as
// objects are freed after it saturated.
__extension__ typedef unsigned __int128 uint128;
uint64_t saturate(uint128 v) { return v > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(v); }

nlohmann::json hist_json(const Log2Histogram& h) {
  nlohmann::json a = nlohmann::json::array();
  for (unsigned k = 0; k < h.buckets.size(); ++k) {
    if (!h.buckets[k]) continue;
    const uint64_t lo = k == 0 ? 0 : uint64_t{1} << (k - 1);
    const uint64_t hi = k == 0 ? 0 : (k == 64 ? UINT64_MAX : (uint64_t{1} << k) - 1);
    a.push_back({{"min", lo}, {"max", hi}, {"count", h.buckets[k]}});
  }
  return {{"samples", h.samples}, {"buckets", a}};
}

void hist_text(std::string& out, const char* title, const Log2Histogram& h) {
  if (!h.samples) return;
  out += title;
  out += " (log2 buckets):\n";
  uint64_t max = 0;
  for (uint64_t c : h.buckets) max = std::max(max, c);
  for (unsigned k = 0; k < h.buckets.size(); ++k) {
    if (!h.buckets[k]) continue;
    char line[160];
    const int bar = static_cast<int>(std::lround(40.0 * double(h.buckets[k]) / double(max)));
    std::snprintf(line, sizeof line, "  %-36s %14s %5.1f%%  %s\n", Log2Histogram::label(k).c_str(),
                  group_digits(h.buckets[k]).c_str(), 100.0 * double(h.buckets[k]) / double(h.samples),
                  std::string(static_cast<size_t>(bar), '#').c_str());
    out += line;
  }
}

}  // namespace

std::string Log2Histogram::label(unsigned k) {
  if (k == 0) return "0";
  const uint64_t lo = uint64_t{1} << (k - 1);
  if (k == 64) return group_digits(lo) + "..";
  return group_digits(lo) + ".." + group_digits((uint64_t{1} << k) - 1);
}

TraceStats compute_stats(const trace::TraceReader& r) {
  TraceStats s;
  s.thread_ids = r.active_threads();
  s.threads = static_cast<uint32_t>(s.thread_ids.size());
  s.has_time = r.has_time();
  s.thread_ops.resize(s.threads);
  s.thread_events.resize(s.threads);
  auto live = IdMap<Obj>::for_events(r.event_count());  // by id
  uint32_t cached_thread = UINT32_MAX;
  size_t cached_slot = 0;
  uint128 live_bytes = 0;
  // The program's own mappings, applied in their place among the heap calls.
  // (Read as the heap events go by, never all held.)
  trace::MemoryCursor memory(r);
  bool memory_left = r.has_memory_events();
  trace::MappedBytes mapped;
  auto memory_until = [&](uint64_t seq) {
    const trace::MemoryEvent* m;
    for (; (m = memory.peek()) != nullptr && m->op != trace::MemOp::object && m->after <= seq; memory.next()) {
      if (m->op == trace::MemOp::latency) continue;
      ++s.memory_ops[unsigned(m->op)];
      if (m->op == trace::MemOp::map || m->op == trace::MemOp::remap) ++s.regions;
      mapped.apply(*m);
    }
    memory_left = m && m->op != trace::MemOp::object;
  };
  s.objects_with_resident_pages = r.memory_event_count(trace::MemOp::object);
  s.program_timed_calls = r.memory_event_count(trace::MemOp::latency);
  {
    nlohmann::json meta = common::parse_bounded_json(r.metadata(), &s.metadata_not_read);
    if (meta.is_object() && meta.contains("capture") && meta["capture"].is_object()) {
      const nlohmann::json& c = meta["capture"];
      s.program_anon_peak_kib = c.value("anon_rss_peak_kib", uint64_t{0});
      s.explained_peak_bytes = c.value("explained_peak_bytes", uint64_t{0});
      if (c.contains("coverage") && c["coverage"].is_number()) s.coverage = c["coverage"].get<double>();
      s.times_per_thread = s.has_time && common::times_per_thread(c, s.threads);
    }
  }

  trace::MergedCursor cur(r);
  std::vector<Event> buf(4096);
  bool first = true;
  const uint64_t total = r.event_count();
  unsigned next_point = 1;  // (point 0: nothing done, nothing live)
  common::Progress progress("heaplab stats", r.event_count());
  while (size_t n = cur.next(buf.data(), buf.size())) {
    progress.update(s.events);
    for (size_t i = 0; i < n; ++i) {
      const Event& e = buf[i];
      if (memory_left) memory_until(e.seq);
      const unsigned op = static_cast<unsigned>(e.op);
      ++s.events;
      ++s.ops[op];
      // Slot of the event's thread among the active ones (cached: runs of
      // one thread are the common case).
      if (e.thread != cached_thread) {
        cached_thread = e.thread;
        cached_slot = static_cast<size_t>(std::lower_bound(s.thread_ids.begin(), s.thread_ids.end(), e.thread) -
                                          s.thread_ids.begin());
      }
      ++s.thread_ops[cached_slot][op];
      ++s.thread_events[cached_slot];
      if (e.flags & trace::kFailed) ++s.failed[op];
      if (s.has_time) {
        // Earliest and latest time: clocks of different threads may be
        // slightly out of seq order, and every reported time is relative to
        // first_time.
        s.first_time = first ? e.time : std::min(s.first_time, e.time);
        s.last_time = std::max(s.last_time, e.time);
      }
      first = false;
      if (e.op == Op::lost) s.lost_events += e.count;
      if (trace::op_consumes(e.op) && !(e.flags & trace::kFailed)) {
        if (e.old == 0) {
          if (!trace::op_produces(e.op)) ++s.null_frees;
        } else {
          Obj o;
          if (live.erase(e.old, &o)) {
            live_bytes -= o.bytes;
            ++s.objects_freed;
            if (o.thread != e.thread) ++s.objects_freed_by_other_thread;
            const unsigned size_class = Log2Histogram::bucket_of(o.bytes);
            s.lifetime_events.add(e.seq - o.seq);
            s.lifetime_events_by_size[size_class].add(e.seq - o.seq);
            if (s.has_time) {
              s.lifetime_ns.add(e.time >= o.time ? e.time - o.time : 0);
              s.lifetime_ns_by_size[size_class].add(e.time >= o.time ? e.time - o.time : 0);
            }
          } else {
            ++s.unknown_frees;
          }
        }
      }
      if (e.id != 0) {
        const uint64_t b = e.requested_bytes();
        live.put(e.id, Obj{e.seq, e.time, b, e.thread});
        live_bytes += b;
        ++s.objects_created;
        s.bytes_requested = sat_add(s.bytes_requested, b);
        s.sizes.add(b);
        if (saturate(live_bytes) > s.live_bytes.value) {
          s.live_bytes = {saturate(live_bytes), e.seq, e.time};
          s.live_objects_at_bytes_peak = live.size();
        }
        if (live.size() > s.live_objects.value) s.live_objects = {live.size(), e.seq, e.time};
      }
      s.combined_peak = std::max(s.combined_peak, saturate(live_bytes + mapped.now()));
      // The curve: the point k is the live bytes once k/20 of the events are done.
      while (next_point <= 20 && s.events * 20 >= next_point * total) s.live_curve[next_point++] = saturate(live_bytes);
    }
  }
  while (next_point <= 20) s.live_curve[next_point++] = saturate(live_bytes);
  memory_until(UINT64_MAX);
  s.combined_peak = std::max(s.combined_peak, saturate(live_bytes + mapped.now()));
  s.mapped_peak = mapped.peak();
  s.live_bytes_end = saturate(live_bytes);
  s.live_objects_end = live.size();
  return s;
}

nlohmann::json stats_to_json(const TraceStats& s) {
  nlohmann::json j;
  j["events"] = s.events;
  j["threads"] = s.threads;
  j["has_time"] = s.has_time;
  if (s.has_time) j["duration_ns"] = s.last_time - s.first_time;
  nlohmann::json ops = nlohmann::json::object();
  nlohmann::json failed = nlohmann::json::object();
  for (unsigned k = 0; k < trace::kOpCount; ++k) {
    const std::string name(trace::kOpInfo[k].name);
    if (s.ops[k]) ops[name] = s.ops[k];
    if (s.failed[k]) failed[name] = s.failed[k];
  }
  j["operations"] = ops;
  j["failed"] = failed;
  nlohmann::json th = nlohmann::json::array();
  for (uint32_t t = 0; t < s.threads; ++t) {
    nlohmann::json o = nlohmann::json::object();
    for (unsigned k = 0; k < trace::kOpCount; ++k)
      if (s.thread_ops[t][k]) o[std::string(trace::kOpInfo[k].name)] = s.thread_ops[t][k];
    th.push_back({{"thread", s.thread_ids[t]}, {"events", s.thread_events[t]}, {"operations", o}});
  }
  j["per_thread"] = th;
  j["objects"] = {{"created", s.objects_created},
                  {"freed", s.objects_freed},
                  {"freed_by_other_thread", s.objects_freed_by_other_thread},
                  {"cross_thread_free_fraction", s.cross_thread_free_fraction()},
                  {"live_at_end", s.live_objects_end},
                  {"null_frees", s.null_frees},
                  {"unknown_frees", s.unknown_frees}};
  j["bytes_requested"] = s.bytes_requested;
  j["peak_live_bytes"] = {
      {"bytes", s.live_bytes.value}, {"seq", s.live_bytes.seq}, {"objects", s.live_objects_at_bytes_peak}};
  if (s.has_time) j["peak_live_bytes"]["time_ns"] = s.live_bytes.time;
  j["peak_live_objects"] = {{"objects", s.live_objects.value}, {"seq", s.live_objects.seq}};
  if (s.has_time) j["peak_live_objects"]["time_ns"] = s.live_objects.time;
  j["live_bytes_at_end"] = s.live_bytes_end;
  j["lost_events"] = s.lost_events;
  j["size_histogram"] = hist_json(s.sizes);
  j["lifetime_events_histogram"] = hist_json(s.lifetime_events);
  if (s.has_time) j["lifetime_ns_histogram"] = hist_json(s.lifetime_ns);
  nlohmann::json by_size = nlohmann::json::array();
  for (unsigned k = 0; k < s.lifetime_events_by_size.size(); ++k) {
    const Log2Histogram& h = s.lifetime_events_by_size[k];
    if (!h.samples) continue;
    nlohmann::json c = {{"size_min", k == 0 ? 0 : uint64_t{1} << (k - 1)},
                        {"size_max", k == 0 ? 0 : (k == 64 ? UINT64_MAX : (uint64_t{1} << k) - 1)},
                        {"freed", h.samples},
                        {"events_histogram", hist_json(h)}};
    if (s.has_time) c["ns_histogram"] = hist_json(s.lifetime_ns_by_size[k]);
    by_size.push_back(c);
  }
  j["lifetime_by_size_class"] = by_size;
  nlohmann::json mem = nlohmann::json::object();
  for (unsigned k = 1; k <= trace::kMemOpMax; ++k)
    if (s.memory_ops[k]) mem[std::string(trace::mem_op_name(trace::MemOp(k)))] = s.memory_ops[k];
  if (!mem.empty() || s.objects_with_resident_pages)
    j["memory"] = {{"calls", mem},
                   {"regions", s.regions},
                   {"mapped_peak_bytes", s.mapped_peak},
                   {"heap_and_mapped_peak_bytes", s.combined_peak},
                   {"objects_with_resident_pages", s.objects_with_resident_pages}};
  if (s.program_timed_calls) j["program_timed_calls"] = s.program_timed_calls;
  if (s.coverage >= 0)
    j["coverage"] = {{"program_anon_peak_kib", s.program_anon_peak_kib},
                     {"explained_peak_bytes", s.explained_peak_bytes},
                     {"share", s.coverage},
                     {"warning", common::coverage_warns(s.coverage, s.explained_peak_bytes, s.program_anon_peak_kib)}};
  if (!s.metadata_not_read.empty()) j["metadata_not_read"] = s.metadata_not_read;
  if (s.times_per_thread) j["times_per_thread"] = true;
  return j;
}

std::string stats_to_text(const TraceStats& s) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "events: %s in %u thread%s%s\n", group_digits(s.events).c_str(), s.threads,
                s.threads == 1 ? "" : "s", s.has_time ? "" : " (no timestamps)");
  out += line;
  if (s.has_time) {
    std::snprintf(line, sizeof line, "duration: %.6f s\n", double(s.last_time - s.first_time) / 1e9);
    out += line;
  }
  if (s.lost_events) out += "lost events (capture overflow): " + group_digits(s.lost_events) + "\n";
  out += "operations:\n";
  for (unsigned k = 0; k < trace::kOpCount; ++k) {
    if (!s.ops[k]) continue;
    std::snprintf(line, sizeof line, "  %-26s %14s", std::string(trace::kOpInfo[k].name).c_str(),
                  group_digits(s.ops[k]).c_str());
    out += line;
    if (s.failed[k]) out += "  (" + group_digits(s.failed[k]) + " failed)";
    out += "\n";
  }
  if (s.threads > 1) {
    out += "per thread (events; top operations):\n";
    for (uint32_t t = 0; t < s.threads; ++t) {
      std::snprintf(line, sizeof line, "  thread %-5u %14s ", s.thread_ids[t],
                    group_digits(s.thread_events[t]).c_str());
      out += line;
      for (unsigned k = 0; k < trace::kOpCount; ++k)
        if (s.thread_ops[t][k])
          out += " " + std::string(trace::kOpInfo[k].name) + "=" + group_digits(s.thread_ops[t][k]);
      out += "\n";
    }
  }
  std::snprintf(line, sizeof line, "objects: %s created, %s freed (%.2f%% by another thread), %s live at end\n",
                group_digits(s.objects_created).c_str(), group_digits(s.objects_freed).c_str(),
                100.0 * s.cross_thread_free_fraction(), group_digits(s.live_objects_end).c_str());
  out += line;
  if (s.null_frees) out += "frees of NULL: " + group_digits(s.null_frees) + "\n";
  if (s.unknown_frees) out += "frees of objects not live: " + group_digits(s.unknown_frees) + "\n";
  out += "bytes requested: " + group_digits(s.bytes_requested) + "\n";
  std::snprintf(line, sizeof line, "peak live bytes: %s at seq %s (%s objects live then)",
                group_digits(s.live_bytes.value).c_str(), group_digits(s.live_bytes.seq).c_str(),
                group_digits(s.live_objects_at_bytes_peak).c_str());
  out += line;
  if (s.has_time) {
    std::snprintf(line, sizeof line, ", t=%.6f s", double(s.live_bytes.time - s.first_time) / 1e9);
    out += line;
  }
  out += "\n";
  std::snprintf(line, sizeof line, "peak live objects: %s at seq %s", group_digits(s.live_objects.value).c_str(),
                group_digits(s.live_objects.seq).c_str());
  out += line;
  if (s.has_time) {
    std::snprintf(line, sizeof line, ", t=%.6f s", double(s.live_objects.time - s.first_time) / 1e9);
    out += line;
  }
  out += "\n";
  out += "live bytes at end: " + group_digits(s.live_bytes_end) + "\n";
  uint64_t memory_calls = 0;
  for (uint64_t c : s.memory_ops) memory_calls += c;
  if (memory_calls || s.objects_with_resident_pages) {
    out += "the program's own memory (besides malloc):\n";
    for (unsigned k = 1; k <= trace::kMemOpMax; ++k)
      if (s.memory_ops[k])
        out += fmt::format("  {:<38}{:>10}\n", trace::mem_op_name(trace::MemOp(k)), group_digits(s.memory_ops[k]));
    out += "  mappings: " + group_digits(s.regions) + ", peak mapped bytes: " + group_digits(s.mapped_peak) + "\n";
    out += "  heap and mappings together, peak: " + group_digits(s.combined_peak) + "\n";
    out += "  large blocks with their resident pages recorded: " + group_digits(s.objects_with_resident_pages) + "\n";
  }
  if (s.program_timed_calls)
    out += "calls timed inside the allocator in the program: " + group_digits(s.program_timed_calls) + "\n";
  if (s.coverage >= 0) out += common::coverage_text(s.coverage, s.explained_peak_bytes, s.program_anon_peak_kib) + "\n";
  if (!s.metadata_not_read.empty())
    out += "note: the metadata was not read (" + s.metadata_not_read + "): what it says of the capture is left out\n";
  if (s.times_per_thread)
    out += "warning: " +
           common::times_per_thread_text(
               "its lifetimes in ns read short (many at 0); capture the program again, or "
               "normalise its kept raw files again (heaplab import --from heaplab-raw)") +
           "\n";
  hist_text(out, "request sizes in bytes", s.sizes);
  hist_text(out, "lifetimes in events", s.lifetime_events);
  hist_text(out, "lifetimes in ns", s.lifetime_ns);
  // Per size class: how long its objects live, as the log2 buckets holding
  // the median and the 90th percentile.
  bool any = false;
  for (const Log2Histogram& h : s.lifetime_events_by_size) any = any || h.samples;
  if (any) {
    out += "lifetimes by size class (log2 buckets of the median and the 90th percentile):\n";
    // (The size column as wide as its widest label: 22, or more from 2^36 on.)
    int size_w = 22;
    for (unsigned k = 0; k < s.lifetime_events_by_size.size(); ++k)
      if (s.lifetime_events_by_size[k].samples) size_w = std::max(size_w, int(Log2Histogram::label(k).size()));
    char row[320];
    std::snprintf(row, sizeof row, "  %-*s %12s  %-24s %-24s%s\n", size_w, "size (bytes)", "freed", "median (events)",
                  "p90 (events)", s.has_time ? " median (ns)                    p90 (ns)" : "");
    std::string head = row;
    while (head.size() > 1 && head[head.size() - 2] == ' ') head.erase(head.size() - 2, 1);
    out += head;
    for (unsigned k = 0; k < s.lifetime_events_by_size.size(); ++k) {
      const Log2Histogram& h = s.lifetime_events_by_size[k];
      if (!h.samples) continue;
      std::string ns;
      if (s.has_time) {
        const Log2Histogram& t = s.lifetime_ns_by_size[k];
        char cols[96];
        std::snprintf(cols, sizeof cols, " %-30s %s", Log2Histogram::label(t.quantile_bucket(0.5)).c_str(),
                      Log2Histogram::label(t.quantile_bucket(0.9)).c_str());
        ns = cols;
      }
      std::snprintf(row, sizeof row, "  %-*s %12s  %-24s %-24s%s\n", size_w, Log2Histogram::label(k).c_str(),
                    group_digits(h.samples).c_str(), Log2Histogram::label(h.quantile_bucket(0.5)).c_str(),
                    Log2Histogram::label(h.quantile_bucket(0.9)).c_str(), ns.c_str());
      std::string r = row;
      while (r.size() > 1 && r[r.size() - 2] == ' ') r.erase(r.size() - 2, 1);  // no blanks before the newline
      out += r;
    }
  }
  return out;
}

}  // namespace heaplab::analysis
