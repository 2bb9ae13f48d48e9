// Reassembles heap events from the ptwrite payloads of one PT stream (one
// thread in per-thread mode), in order, with the losses counted: events cut
// by lost data, events missing whole (gaps in the sequence numbers), and
// words that belong to no event.
#pragma once

#include <cstdint>

#include "capture/shim/ptw_format.h"

namespace heaplab::pt {

struct PtwEvent {
  uint32_t op = 0;
  uint32_t seq = 0;
  uint64_t a = 0, b = 0, c = 0;
  uint64_t tsc = 0;  // the TSC the shim read (payload word 1)
  // Events were lost right before this one (a sequence gap, or a loss the
  // stream signalled): its time may come from a timing packet that was
  // itself damaged, so a consumer should not trust it beyond keeping the
  // thread's events in order.
  bool after_gap = false;
};

struct PtwLosses {
  // Events lost: gaps in the sequence numbers between accepted events. This
  // is the count: an event that was cut shows here too, as the gap it left.
  uint64_t missing = 0;
  uint64_t cut = 0;          // of those, events begun but not completed (or failing their check)
  uint64_t stray = 0;        // 64-bit words outside any event (right after a loss, or not ours)
  uint64_t short_words = 0;  // 32-bit ptwrite payloads (not ours)
  uint64_t total() const { return missing; }
};

class PtwAssembler {
 public:
  // One 64-bit payload; calls sink(const PtwEvent&) when an event is
  // complete and checks out.
  //
  // In step, the four words after a header are its fields whatever they
  // look like (a count or alignment may look like a header). Only when an
  // event fails its check (words were lost without a loss being signalled)
  // is a header looked for among its field words, and decoding picks up
  // from there.
  template <class Sink>
  void word(uint64_t w, Sink&& sink) {
    if (have_ == 0) {
      if (!is_header(w)) {
        ++losses_.stray;
        return;
      }
      words_[0] = w;
      have_ = 1;
      return;
    }
    words_[have_] = w;
    if (++have_ < kWordsPerEvent) return;
    have_ = 0;
    const uint64_t h = words_[0];
    if (check_byte(words_[1], words_[2], words_[3], words_[4], header_seq(h)) == header_check(h)) {
      PtwEvent e;
      e.op = header_op(h);
      e.seq = header_seq(h);
      e.tsc = words_[1];
      e.a = words_[2];
      e.b = words_[3];
      e.c = words_[4];
      // The shim numbers a thread's events from 0: a first event numbered
      // k means k were lost before it.
      const uint32_t gap = seen_ ? uint32_t(e.seq - last_seq_ - 1) : e.seq;
      losses_.missing += gap;
      e.after_gap = gap != 0 || resumed_;
      resumed_ = false;
      seen_ = true;
      last_seq_ = e.seq;
      ++events_;
      sink(e);
      return;
    }
    ++losses_.cut;
    resumed_ = true;
    // Resynchronise inside the failed event: its first field word that
    // looks like a header starts over, with the words after it.
    for (unsigned k = 1; k < kWordsPerEvent; ++k) {
      if (!is_header(words_[k])) continue;
      uint64_t rest[kWordsPerEvent];
      for (unsigned m = 0; m < kWordsPerEvent; ++m) rest[m] = words_[m];
      for (unsigned m = k; m < kWordsPerEvent; ++m) word(rest[m], sink);
      return;
    }
  }
  // Data may have been lost here (OVF, a decoder resync, a truncated
  // buffer). An event in progress is kept: it completes only if its check
  // byte still matches the words that follow, exactly as when the loss is
  // not signalled (the perf script routes never see it), so every decoder
  // keeps the same events.
  void lost() { resumed_ = true; }
  void short_word() { ++losses_.short_words; }
  const PtwLosses& losses() const { return losses_; }
  uint64_t events() const { return events_; }

 private:
  uint64_t words_[kWordsPerEvent] = {};
  unsigned have_ = 0;  // words of the current event seen (0: none)
  bool seen_ = false;
  bool resumed_ = false;  // data was lost since the last event
  uint32_t last_seq_ = 0;
  uint64_t events_ = 0;
  PtwLosses losses_;
};

}  // namespace heaplab::pt
