// `heaplab layout`: where an allocator put each block of a trace, from one
// replay's addresses (format 1.2, replay/addresses.h). Fed every event in
// seq order with its address, it says of each call what the Compact Memory
// Traces seed's overhead.py said: the neighbouring live blocks below and
// above and the gaps to them, the pages the block spans, and how many pages
// the working set (the pages holding a live block's requested bytes) gained
// or gave back; and it sums that up per allocator: gap and pages-per-object
// histograms by size class, the working set over the trace, and blocks that
// share a page or a cache line with another thread's live block.
//
// The events come in the trace's order, but a replay with several threads
// runs them concurrently: a block one thread frees may be handed out again
// before the trace's order frees it, or a block placed where a later one
// (in the trace) was placed and freed first. A block placed over live ones
// therefore takes them as freed then ("reused early"). Where the replay ran
// the calls in the trace's order (one replay thread: a trace of one thread,
// or `--threads 1`), that cannot happen: any is an overlap, the allocator
// handing out live memory.
//
// Memory follows the live blocks (an ordered map by address, and one by
// object id), never the trace's length.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/trace_stats.h"
#include "capture/format/event.h"

namespace heaplab::analysis {

inline constexpr uint64_t kLayoutPage = 4096;
inline constexpr uint64_t kCacheLine = 64;

// What one call did to the layout.
struct LayoutNote {
  enum class Kind : uint8_t {
    none,      // no block placed or released (a NULL result, a thread marker, no address)
    placed,    // a block was placed (realloc: the old one released first, in pages_delta)
    released,  // a block was released
  };
  Kind kind = Kind::none;
  uint64_t address = 0, bytes = 0;  // the block (requested bytes)
  // The nearest live blocks below and above: their addresses and the bytes
  // between them and this block (placed blocks only).
  bool has_prev = false, has_next = false;
  uint64_t prev = 0, prev_gap = 0, next = 0, next_gap = 0;
  uint64_t first_page = 0, last_page = 0;  // the pages the block spans (page-aligned addresses)
  int64_t pages_delta = 0;                 // working-set pages gained (+) or given back (-)
  uint32_t reused_early = 0;               // live blocks it lies on, taken as freed (see above)
};

struct LayoutSummary {
  uint64_t events = 0;
  uint64_t placed = 0, released = 0;
  uint64_t unaddressed = 0;   // producing calls without an address (NULL in the replay)
  uint64_t reused_early = 0;  // blocks placed on by another block before the trace freed them
  bool in_order = false;      // the replay ran the calls in the trace's order
  uint64_t overlaps = 0;      // in order: the reused early blocks, the allocator's fault; else 0
  uint64_t pages = 0;         // working set now, in pages
  uint64_t pages_peak = 0, pages_peak_seq = 0;
  uint64_t live_bytes = 0, live_bytes_at_pages_peak = 0, live_bytes_peak = 0;
  // Placed blocks sharing a page (a cache line) with a live block of another thread.
  uint64_t shared_page_other_thread = 0, shared_line_other_thread = 0;
  // By size class (Log2Histogram's buckets of requested bytes): placed
  // blocks, the gap to the next live block above, and pages spanned.
  struct SizeClass {
    uint64_t objects = 0;
    Log2Histogram gap_above;
    Log2Histogram pages;
  };
  std::array<SizeClass, 65> by_size{};
  // The working set over the trace: (seq, pages, live requested bytes),
  // about 512 points evenly spaced by event, and the last event.
  struct Point {
    uint64_t seq, pages, live_bytes;
  };
  std::vector<Point> curve;
};

class LayoutAnalyzer {
 public:
  // `events`: how many events will come (spaces the curve's points);
  // `in_order`: the replay ran them in this order (one replay thread).
  explicit LayoutAnalyzer(uint64_t events, bool in_order = true);
  // The next event (seq order) and its address (0: none): what it did.
  LayoutNote observe(const trace::Event& e, uint64_t address);
  // Call once after the last event (adds the curve's last point).
  void finish();
  const LayoutSummary& summary() const { return s_; }

  // The seed's annotation: "prev 0x1000, gap 16, next none, pages
  // [0x1000, 0x1000], 1 more pages" for a placed block (", reuses 1 block
  // early" after it if so), "pages [0x1000, 0x1000], 1 fewer pages" for a
  // released one; "" for none.
  static std::string note_text(const LayoutNote& n);
  // `line` (ending in '\n') with " # TEXT" after it, padded to 49 columns
  // (as cat --annotate); unchanged for a note of kind none.
  static void append(std::string& line, const LayoutNote& n);

 private:
  struct Block {
    uint64_t end;  // address + max(bytes, 1)
    uint64_t bytes;
    uint64_t id;
    uint32_t thread;
  };
  // Releases the block at `address`; the pages it gave back.
  int64_t release(uint64_t address);
  // The pages of a block spanning pages [first, last] that no other live
  // block lies on; `next`: the first live block above it.
  uint64_t own_pages(uint64_t first, uint64_t last, std::map<uint64_t, Block>::const_iterator next) const;
  void sample(uint64_t seq);

  std::map<uint64_t, Block> live_;              // by address
  std::unordered_map<uint64_t, uint64_t> ids_;  // object id -> address
  // Objects reused early, until the trace frees them.
  std::unordered_map<uint64_t, bool> early_;
  uint64_t stride_ = 1;
  uint64_t last_seq_ = 0;
  LayoutSummary s_;
};

// The summary as JSON ("heaplab layout --json"): counts, by size class
// (label, objects, gap and pages histograms as {label: count}), the curve.
nlohmann::json layout_json(const LayoutSummary& s);

// Several allocators' summaries side by side, as text: one column each.
std::string layout_table(const std::vector<std::pair<std::string, const LayoutSummary*>>& columns);
// One allocator's size classes: objects, gap to the block above (median and
// p90 bucket), pages per object (median and largest bucket).
std::string layout_size_table(const LayoutSummary& s);

}  // namespace heaplab::analysis
