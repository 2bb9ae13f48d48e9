#include "replay/addresses.h"

#include <algorithm>
#include <stdexcept>

#include "analysis/event_text.h"
#include "capture/format/trace_reader.h"
#include "capture/format/trace_writer.h"
#include "common/files.h"
#include "common/json.h"

namespace heaplab::replay {

EmittedTrace write_trace_with_addresses(const std::string& trace, std::vector<uint64_t> addresses,
                                        const std::string& out, const nlohmann::json& replay) {
  auto r = trace::TraceReader::open(trace);
  if (!r->complete())
    throw std::runtime_error(trace + ": --emit-trace needs a complete trace (this one is truncated: " + r->warning() +
                             ")");
  if (addresses.size() != r->event_count())
    throw std::runtime_error(trace + ": " + std::to_string(addresses.size()) + " addresses for " +
                             std::to_string(r->event_count()) + " events");
  nlohmann::json meta = common::parse_bounded_json(r->metadata());
  if (!meta.is_object()) meta = nlohmann::json::object();
  // (The writer makes the file 1.2 only if some event has an address.)
  if (std::any_of(addresses.begin(), addresses.end(), [](uint64_t a) { return a != 0; }))
    meta["format_version"] = std::to_string(trace::kFormatMajor) + "." + std::to_string(trace::kFormatMinorAddresses);
  meta["replay"] = replay;
  trace::WriterOptions wo;
  wo.timestamps = r->has_time();
  wo.metadata_json = meta.dump();
  EmittedTrace e;
  common::write_then_rename(out, [&](const std::string& tmp) {
    trace::TraceWriter w(tmp, wo);
    for (const auto& [thread, info] : r->thread_table()) w.set_thread_info(thread, info);
    trace::MergedCursor cur(*r);
    std::vector<trace::Event> buf(4096);
    uint64_t i = 0;
    while (size_t n = cur.next(buf.data(), buf.size())) {
      for (size_t k = 0; k < n; ++k, ++i) {
        trace::Event ev = buf[k];
        const uint64_t id = ev.id;
        // A complete trace's ids are dense in seq order: the writer gives
        // each object the id it had.
        if (w.append(ev) != id || ev.seq != buf[k].seq)
          throw std::runtime_error(trace + ": event " + std::to_string(buf[k].seq) +
                                   ": its ids or seqs are not dense (heaplab check says where)");
        if (addresses[i] != 0) ++e.addressed;
      }
    }
    e.events = i;
    // (Copied as it is; a block with a later minor's records is written
    // again with the records this version knows, as it would write them.)
    if (!r->memory_block().empty())
      w.copy_memory_block(r->memory_block());
    else if (r->has_memory_events())
      w.set_memory_events(r->read_memory_events());
    w.set_addresses(std::move(addresses));
    w.set_final_metadata(meta.dump());
    w.close();
    e.bytes = w.bytes_written();
  });
  return e;
}

analysis::LayoutSummary measure_layout(const std::string& trace,
                                       const std::function<uint64_t(uint64_t, uint64_t)>& address, bool in_order,
                                       const LayoutLines* lines) {
  auto r = trace::TraceReader::open(trace);
  analysis::LayoutAnalyzer layout(r->event_count(), in_order);
  trace::MergedCursor cur(*r);
  std::vector<trace::Event> buf(4096);
  std::string line;
  uint64_t i = 0;
  while (size_t n = cur.next(buf.data(), buf.size())) {
    for (size_t k = 0; k < n; ++k, ++i) {
      const uint64_t a = address(i, buf[k].seq);
      const analysis::LayoutNote note = layout.observe(buf[k], a);
      if (lines) {
        analysis::event_text(buf[k], r->has_time(), line, a);
        analysis::LayoutAnalyzer::append(line, note);
        (*lines)(line);
      }
    }
  }
  layout.finish();
  return layout.summary();
}

ReplayLayout replay_layout(ReplayOptions opt, const LayoutLines* lines) {
  ReplayLayout l;
  std::vector<uint64_t> addresses;
  opt.addresses = &addresses;
  l.outcome = run_replay(opt);
  if (!l.outcome.addresses_read) return l;
  const bool in_order = l.outcome.result.value("replay_threads", 0) <= 1;
  l.summary = measure_layout(
      opt.trace, [&](uint64_t i, uint64_t) { return i < addresses.size() ? addresses[i] : 0; }, in_order, lines);
  l.measured = true;
  return l;
}

}  // namespace heaplab::replay
