#include "analysis/trace_check.h"
#include "common/progress.h"

#include <bit>

#include <nlohmann/json.hpp>

#include "capture/format/flat_map.h"
#include "capture/format/id_map.h"
#include "common/json.h"

namespace heaplab::analysis {

using trace::Event;
using trace::Op;

CheckReport check_trace(const trace::TraceReader& r, size_t max_listed) {
  CheckReport rep;
  auto problem = [&](uint64_t seq, uint32_t thread, std::string msg) {
    if (rep.listed.size() < max_listed) rep.listed.push_back({seq, thread, std::move(msg)});
    ++rep.problems;
  };
  if (!r.complete()) problem(0, 0, r.warning());
  {
    std::string why;
    nlohmann::json meta = common::parse_bounded_json(r.metadata(), &why);
    if (!why.empty())
      problem(0, 0, "metadata block not read: " + why);
    else if (meta.is_discarded() || !meta.is_object())
      problem(0, 0, "metadata block is not a JSON object");
  }

  struct ThreadState {
    uint64_t events = 0;
    uint64_t last_time = 0;
    bool ended = false;
  };
  FlatMap<ThreadState> threads;  // by thread index + 1 (keys must be non-zero)
  struct Obj {
    uint64_t bytes;  // requested
    uint64_t align;  // aligned calls' alignment, else 0
  };
  auto live = IdMap<Obj>::for_events(r.event_count());  // by id
  uint64_t max_id = 0;
  uint64_t expected_seq = 0;
  uint64_t missing_seqs = 0;
  bool have_prev = false;
  uint64_t prev_seq = 0;

  trace::MergedCursor cur(r);
  std::vector<Event> buf(4096);
  common::Progress progress("heaplab check", r.event_count());
  while (size_t n = cur.next(buf.data(), buf.size())) {
    progress.update(rep.events);
    for (size_t i = 0; i < n; ++i) {
      const Event& e = buf[i];
      ++rep.events;
      // (Its name, for the messages of the rare events that have a problem.)
      const auto op = [&e] { return std::string(trace::op_name(e.op)); };
      if (have_prev && e.seq <= prev_seq) {
        problem(e.seq, e.thread, "seq " + std::to_string(e.seq) + " appears more than once");
      } else if (e.seq != expected_seq) {
        missing_seqs += e.seq - expected_seq;
      }
      have_prev = true;
      prev_seq = e.seq;
      expected_seq = e.seq + 1;

      ThreadState* tsp = threads.find(uint64_t{e.thread} + 1);
      if (!tsp) {
        threads.put(uint64_t{e.thread} + 1, ThreadState{});
        tsp = threads.find(uint64_t{e.thread} + 1);
      }
      ThreadState& ts = *tsp;
      if (ts.ended) problem(e.seq, e.thread, op() + " after thread_end");
      if (e.op == Op::thread_start && ts.events != 0)
        problem(e.seq, e.thread, "thread_start is not the thread's first event");
      if (e.op == Op::thread_end) ts.ended = true;
      if (r.has_time() && ts.events != 0 && e.time < ts.last_time)
        problem(e.seq, e.thread,
                "time goes backwards in this thread (" + std::to_string(e.time) + " ns after " +
                    std::to_string(ts.last_time) + " ns)");
      ts.last_time = e.time;
      ++ts.events;

      if (e.op == Op::lost) rep.lost_events += e.count;
      const bool produces = trace::op_produces(e.op);
      if (!produces && e.flags != 0) problem(e.seq, e.thread, op() + " carries result flags, but it returns nothing");
      if ((e.flags & trace::kFailed) && !(e.flags & trace::kNullResult))
        problem(e.seq, e.thread, op() + " failed but has a result");
      const bool complete = r.complete();
      if (trace::op_consumes(e.op) && e.old != 0) {
        // A failed call (realloc returning NULL) leaves its object live, but
        // the object must have been live to be passed at all.
        const bool failed = e.flags & trace::kFailed;
        Obj o{};
        const Obj* kept = failed ? live.find(e.old) : nullptr;
        const bool was_live = failed ? kept != nullptr : live.erase(e.old, &o);
        if (was_live && !failed && !produces) {
          // Undefined for allocators (some crash): a sized or aligned delete
          // naming another size or alignment than the object was made with.
          // (After lost events the trace may have the wrong object.)
          const bool size_differs = trace::op_has(e.op, trace::kSize) && e.size != o.bytes;
          const bool align_differs = trace::op_has(e.op, trace::kAlign) && o.align != 0 && e.align != o.align;
          if ((size_differs || align_differs) && rep.lost_events != 0) {
            ++rep.mismatches_after_loss;
          } else {
            if (size_differs)
              problem(e.seq, e.thread,
                      op() + " of object " + std::to_string(e.old) + " names size " + std::to_string(e.size) +
                          "; it was made with " + std::to_string(o.bytes));
            if (align_differs)
              problem(e.seq, e.thread,
                      op() + " of object " + std::to_string(e.old) + " names alignment " + std::to_string(e.align) +
                          "; it was made with " + std::to_string(o.align));
          }
        }
        if (!was_live) {
          if (!complete) {
            ++rep.refs_to_lost_objects;  // produced in a chunk the truncation lost
          } else if (e.old > max_id) {
            problem(e.seq, e.thread, op() + " of object " + std::to_string(e.old) + ", which does not exist yet");
          } else {
            problem(e.seq, e.thread,
                    op() + " of object " + std::to_string(e.old) +
                        (failed ? ", which was already freed (use after free)"
                                : ", which was already freed (double free)"));
          }
        }
      }
      if (produces && trace::op_has(e.op, trace::kAlign) && !trace::alignment_taken(e.op, e.align) &&
          !(e.flags & trace::kFailed))
        ++rep.odd_alignments;
      if (produces && !(e.flags & trace::kNullResult)) {
        if (e.id != max_id + 1 && complete)
          problem(e.seq, e.thread,
                  op() + " produced object " + std::to_string(e.id) + ", expected the next dense id " +
                      std::to_string(max_id + 1));
        max_id = std::max(max_id, e.id);
        live.put(e.id, Obj{e.requested_bytes(), trace::op_has(e.op, trace::kAlign) ? e.align : 0});
        ++rep.objects;
      } else if (e.id != 0) {
        problem(e.seq, e.thread, op() + " has object id " + std::to_string(e.id) + " but no result");
      }
    }
  }
  if (missing_seqs != 0) {
    if (r.complete()) problem(expected_seq, 0, std::to_string(missing_seqs) + " seq numbers are missing");
  }
  if (rep.events != r.event_count())
    problem(expected_seq, 0,
            "decoded " + std::to_string(rep.events) + " events, index lists " + std::to_string(r.event_count()));
  // A replay's addresses (format 1.2): every block decoded (a damaged one
  // throws, as a damaged chunk does).
  trace::AddressCursor addresses(r);
  for (const trace::AddressBlockRef& b : r.address_blocks()) addresses.at(b.first_seq);
  return rep;
}

}  // namespace heaplab::analysis
