#include "analysis/layout.h"

#include <fmt/format.h>

#include <algorithm>

#include "analysis/event_text.h"
#include "common/text.h"

namespace heaplab::analysis {

using common::group_digits;

namespace {

uint64_t page_of(uint64_t a) { return a / kLayoutPage; }
uint64_t line_of(uint64_t a) { return a / kCacheLine; }

}  // namespace

LayoutAnalyzer::LayoutAnalyzer(uint64_t events, bool in_order) : stride_(std::max<uint64_t>(1, events / 512)) {
  s_.in_order = in_order;
}

uint64_t LayoutAnalyzer::own_pages(uint64_t first, uint64_t last,
                                   std::map<uint64_t, Block>::const_iterator next) const {
  // Its interior pages, and its first and last page unless a neighbour also
  // lies on them (blocks never overlap, so only the nearest block below and
  // above can).
  const bool first_shared = next != live_.begin() && page_of(std::prev(next)->second.end - 1) >= first;
  const bool last_shared = next != live_.end() && page_of(next->first) <= last;
  uint64_t own = last - first + 1;
  if (first_shared) --own;
  if (last_shared && (last != first || !first_shared)) --own;
  return own;
}

int64_t LayoutAnalyzer::release(uint64_t address) {
  auto it = live_.find(address);
  if (it == live_.end()) return 0;
  const Block b = it->second;
  it = live_.erase(it);
  s_.live_bytes -= b.bytes;
  const uint64_t lost = own_pages(page_of(address), page_of(b.end - 1), it);
  s_.pages -= lost;
  return -int64_t(lost);
}

LayoutNote LayoutAnalyzer::observe(const trace::Event& e, uint64_t address) {
  LayoutNote n;
  ++s_.events;
  last_seq_ = e.seq;
  const bool produces = trace::op_produces(e.op) && !(e.flags & trace::kNullResult) && e.id != 0;
  // A realloc that failed in the trace but not in the replay moved the
  // object (the program went on with it, at its new address).
  bool moved = false;
  if (trace::op_consumes(e.op) && trace::op_produces(e.op) && (e.flags & trace::kFailed) && e.old != 0 &&
      address != 0 && !early_.count(e.old))
    if (auto it = ids_.find(e.old); it != ids_.end() && it->second != address) moved = true;
  // An address whose block would run past 2^64 is no address.
  const uint64_t span = std::max<uint64_t>(e.requested_bytes(), 1);
  if (address > ~uint64_t{0} - span) address = 0;
  // The consumed object goes first (realloc: its old block).
  if (trace::op_consumes(e.op) && e.old != 0 && (!(e.flags & trace::kFailed) || moved)) {
    if (auto ea = early_.find(e.old); ea != early_.end()) {
      early_.erase(ea);  // released already, when another block was placed on it
    } else if (auto it = ids_.find(e.old); it != ids_.end()) {
      const uint64_t a = it->second;
      ids_.erase(it);
      if (auto b = live_.find(a); b != live_.end()) {
        n.kind = LayoutNote::Kind::released;
        n.address = a;
        n.bytes = b->second.bytes;
        n.first_page = page_of(a) * kLayoutPage;
        n.last_page = page_of(b->second.end - 1) * kLayoutPage;
        n.pages_delta = release(a);
        ++s_.released;
      }
    }
  }
  if (produces && address == 0) ++s_.unaddressed;
  const uint64_t object = produces ? e.id : e.old;
  if ((produces || moved) && address != 0) {
    const int64_t released = n.kind == LayoutNote::Kind::released ? n.pages_delta : 0;
    n = LayoutNote{};
    n.kind = LayoutNote::Kind::placed;
    n.address = address;
    n.bytes = e.requested_bytes();
    const uint64_t end = address + span;
    const uint64_t first = page_of(address), last = page_of(end - 1);
    n.first_page = first * kLayoutPage;
    n.last_page = last * kLayoutPage;
    // Live blocks under this one were freed in the replay before the
    // trace's order frees them: taken as freed now.
    int64_t early_pages = 0;
    for (auto it = live_.lower_bound(address);;) {
      if (it != live_.begin() && std::prev(it)->second.end > address) {
        --it;
      } else if (it == live_.end() || it->first >= end) {
        break;
      }
      early_[it->second.id] = true;
      ids_.erase(it->second.id);
      const uint64_t at = it->first;
      ++it;
      early_pages += release(at);
      ++n.reused_early;
      ++s_.reused_early;
      if (s_.in_order) ++s_.overlaps;
      it = live_.lower_bound(at);
    }
    auto next = live_.lower_bound(address);
    if (next != live_.begin()) {
      const auto& [pa, pb] = *std::prev(next);
      n.has_prev = true;
      n.prev = pa;
      n.prev_gap = address - pb.end;
    }
    if (next != live_.end()) {
      n.has_next = true;
      n.next = next->first;
      n.next_gap = next->first - end;
    }
    const uint64_t gained = own_pages(first, last, next);
    // Another thread's live block on the same page or cache line: walk the
    // neighbours that lie on the block's first and last page (a page holds
    // a bounded number of blocks) until one belongs to another thread.
    bool page_other = false, line_other = false;
    for (auto it = next; it != live_.begin();) {
      --it;
      if (page_of(it->second.end - 1) < first) break;
      if (it->second.thread != e.thread) {
        page_other = true;
        if (line_of(it->second.end - 1) >= line_of(address)) line_other = true;
        break;
      }
    }
    for (auto it = next; it != live_.end() && page_of(it->first) <= last && !(page_other && line_other); ++it) {
      if (it->second.thread != e.thread) {
        page_other = true;
        if (line_of(it->first) <= line_of(end - 1)) line_other = true;
        break;
      }
    }
    if (page_other) ++s_.shared_page_other_thread;
    if (line_other) ++s_.shared_line_other_thread;
    live_.emplace(address, Block{end, n.bytes, object, e.thread});
    ids_[object] = address;
    s_.pages += gained;
    s_.live_bytes += n.bytes;
    n.pages_delta = released + early_pages + int64_t(gained);
    ++s_.placed;
    LayoutSummary::SizeClass& c = s_.by_size[Log2Histogram::bucket_of(n.bytes)];
    ++c.objects;
    if (n.has_next) c.gap_above.add(n.next_gap);
    c.pages.add(last - first + 1);
  }
  if (s_.pages > s_.pages_peak) {
    s_.pages_peak = s_.pages;
    s_.pages_peak_seq = e.seq;
    s_.live_bytes_at_pages_peak = s_.live_bytes;
  }
  s_.live_bytes_peak = std::max(s_.live_bytes_peak, s_.live_bytes);
  if (s_.events % stride_ == 0) sample(e.seq);
  return n;
}

void LayoutAnalyzer::sample(uint64_t seq) {
  if (!s_.curve.empty() && s_.curve.back().seq == seq) return;
  s_.curve.push_back({seq, s_.pages, s_.live_bytes});
}

void LayoutAnalyzer::finish() {
  if (s_.events != 0) sample(last_seq_);
}

std::string LayoutAnalyzer::note_text(const LayoutNote& n) {
  const auto pages = [&]() {
    const int64_t d = n.pages_delta;
    return fmt::format("pages [{:#x}, {:#x}], {} {} pages", n.first_page, n.last_page, d < 0 ? -d : d,
                       d < 0 || n.kind == LayoutNote::Kind::released ? "fewer" : "more");
  };
  switch (n.kind) {
    case LayoutNote::Kind::none:
      return "";
    case LayoutNote::Kind::released:
      return pages();
    case LayoutNote::Kind::placed:
      break;
  }
  std::string t = n.has_prev ? fmt::format("prev {:#x}, gap {}", n.prev, n.prev_gap) : "prev none";
  t += n.has_next ? fmt::format(", next {:#x}, gap {}", n.next, n.next_gap) : ", next none";
  t += ", " + pages();
  if (n.reused_early) t += fmt::format(", reuses {} block{} early", n.reused_early, n.reused_early == 1 ? "" : "s");
  return t;
}

void LayoutAnalyzer::append(std::string& line, const LayoutNote& n) {
  if (n.kind != LayoutNote::Kind::none) append_note(line, note_text(n));
}

namespace {

nlohmann::json histogram_json(const Log2Histogram& h) {
  nlohmann::json o = nlohmann::json::object();
  for (unsigned k = 0; k < h.buckets.size(); ++k)
    if (h.buckets[k]) o[Log2Histogram::label(k)] = h.buckets[k];
  return o;
}

std::string bucket_text(const Log2Histogram& h, double q) {
  return h.samples ? Log2Histogram::label(h.quantile_bucket(q)) : "-";
}

std::string mib(uint64_t pages) { return fmt::format("{:.1f}", double(pages * kLayoutPage) / (1 << 20)); }

}  // namespace

nlohmann::json layout_json(const LayoutSummary& s) {
  nlohmann::json j = {{"events", s.events},
                      {"blocks_placed", s.placed},
                      {"blocks_released", s.released},
                      {"calls_without_address", s.unaddressed},
                      {"blocks_reused_early", s.reused_early},
                      {"replayed_in_order", s.in_order},
                      {"overlapping_blocks", s.overlaps},
                      {"page_bytes", kLayoutPage},
                      {"working_set_pages_peak", s.pages_peak},
                      {"working_set_peak_seq", s.pages_peak_seq},
                      {"live_bytes_at_working_set_peak", s.live_bytes_at_pages_peak},
                      {"live_bytes_peak", s.live_bytes_peak},
                      {"working_set_pages_end", s.pages},
                      {"live_bytes_end", s.live_bytes},
                      {"blocks_sharing_a_page_with_another_thread", s.shared_page_other_thread},
                      {"blocks_sharing_a_cache_line_with_another_thread", s.shared_line_other_thread}};
  nlohmann::json classes = nlohmann::json::array();
  for (unsigned k = 0; k < s.by_size.size(); ++k) {
    const LayoutSummary::SizeClass& c = s.by_size[k];
    if (c.objects == 0) continue;
    classes.push_back({{"size", Log2Histogram::label(k)},
                       {"objects", c.objects},
                       {"gap_above", histogram_json(c.gap_above)},
                       {"pages", histogram_json(c.pages)}});
  }
  j["by_size"] = classes;
  nlohmann::json curve = nlohmann::json::array();
  for (const LayoutSummary::Point& p : s.curve) curve.push_back({p.seq, p.pages, p.live_bytes});
  j["working_set"] = {{"columns", {"seq", "pages", "live_bytes"}}, {"points", curve}};
  return j;
}

std::string layout_table(const std::vector<std::pair<std::string, const LayoutSummary*>>& columns) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head = {""};
  for (const auto& c : columns) head.push_back(c.first);
  rows.push_back(head);
  const auto row = [&](const std::string& name, auto cell) {
    std::vector<std::string> r = {name};
    for (const auto& c : columns) r.push_back(cell(*c.second));
    rows.push_back(std::move(r));
  };
  row("working set peak, pages", [](const LayoutSummary& s) { return group_digits(s.pages_peak); });
  row("working set peak, MiB", [](const LayoutSummary& s) { return mib(s.pages_peak); });
  row("live bytes then, MiB",
      [](const LayoutSummary& s) { return fmt::format("{:.1f}", double(s.live_bytes_at_pages_peak) / (1 << 20)); });
  row("working set / live bytes", [](const LayoutSummary& s) {
    return s.live_bytes_at_pages_peak
               ? fmt::format("{:.2f}x", double(s.pages_peak * kLayoutPage) / double(s.live_bytes_at_pages_peak))
               : std::string("-");
  });
  row("working set at end, pages", [](const LayoutSummary& s) { return group_digits(s.pages); });
  row("blocks placed", [](const LayoutSummary& s) { return group_digits(s.placed); });
  row("gap to the block above, median", [](const LayoutSummary& s) {
    Log2Histogram all;
    for (const auto& c : s.by_size)
      for (unsigned k = 0; k < all.buckets.size(); ++k) {
        all.buckets[k] += c.gap_above.buckets[k];
        all.samples += c.gap_above.buckets[k];
      }
    return bucket_text(all, 0.5);
  });
  row("sharing a page with another thread",
      [](const LayoutSummary& s) { return group_digits(s.shared_page_other_thread); });
  row("sharing a cache line with another thread",
      [](const LayoutSummary& s) { return group_digits(s.shared_line_other_thread); });
  row("calls without an address", [](const LayoutSummary& s) { return group_digits(s.unaddressed); });
  row("reused before the trace freed them", [](const LayoutSummary& s) { return group_digits(s.reused_early); });
  row("overlapping blocks",
      [](const LayoutSummary& s) { return s.in_order ? group_digits(s.overlaps) : std::string("- (threads)"); });
  return common::align_columns(rows, "l" + std::string(columns.size(), 'r'));
}

std::string layout_size_table(const LayoutSummary& s) {
  std::vector<std::vector<std::string>> rows = {
      {"size", "objects", "gap above p50", "gap above p90", "pages p50", "pages max"}};
  for (unsigned k = 0; k < s.by_size.size(); ++k) {
    const LayoutSummary::SizeClass& c = s.by_size[k];
    if (c.objects == 0) continue;
    unsigned top = 0;
    for (unsigned b = 0; b < c.pages.buckets.size(); ++b)
      if (c.pages.buckets[b]) top = b;
    rows.push_back({Log2Histogram::label(k), group_digits(c.objects), bucket_text(c.gap_above, 0.5),
                    bucket_text(c.gap_above, 0.9), bucket_text(c.pages, 0.5), Log2Histogram::label(top)});
  }
  return common::align_columns(rows, "rrrrrr");
}

}  // namespace heaplab::analysis
