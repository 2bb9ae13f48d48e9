// Writes the hostile inputs scripts/bench-hostile-memory.py and
// scripts/bench-memory-records.py measure heaplab's commands on (memory out
// of proportion to the input):
//   make_hostile_traces deep-metadata OUT BYTES   a trace whose metadata is BYTES of '['
//   make_hostile_traces threads OUT N             N threads of one malloc each
//   make_hostile_traces memory OUT N              2,000 objects of 64 KiB made and freed, with
//                                                 N memory records (MEMX): a MiB mapped, then
//                                                 touched and advised N/2 times each among the
//                                                 calls, every malloc timed, each object's
//                                                 resident pages
//   make_hostile_traces calls-huge OUT N          N calls on one thread (objects of 16-215
//                                                 bytes, each freed 2,000 objects later), then
//                                                 a block of 1 TiB made and freed: a heap too
//                                                 big found only at the end
//                                                 (scripts/bench-refusals.py)
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "capture/format/trace_writer.h"

namespace {

using heaplab::trace::Event;
using heaplab::trace::MemOp;
using heaplab::trace::MemoryEvent;
using heaplab::trace::Op;

void write_memory(heaplab::trace::TraceWriter& w, uint64_t records) {
  constexpr uint64_t kObjects = 2000;
  for (uint64_t id = 1; id <= kObjects; ++id) {
    Event m;
    m.op = Op::malloc;
    m.size = 65536;
    w.append(m);
    Event f;
    f.op = Op::free;
    f.old = id;
    w.append(f);
  }
  std::vector<MemoryEvent> mem;
  mem.reserve(records + 2 * kObjects + 1);
  mem.push_back({MemOp::map, 0, 0, 0, 1, 0, 1 << 20, 0, 0, 0});
  const uint64_t rounds = records / 2;
  for (uint64_t i = 0; i < rounds; ++i) {
    const uint64_t after = i * 2 * kObjects / rounds;
    if (after % 2 == 0 && (i == 0 || (i - 1) * 2 * kObjects / rounds != after))
      mem.push_back({MemOp::latency, 0, after, 0, 0, 0, 50, 0, 0, 0});
    mem.push_back({MemOp::touch, 0, after, 0, 1, (i % 256) * 4096, 4096, 1, 0, 0});
    mem.push_back({MemOp::dontneed, 0, after, 0, 1, (i % 256) * 4096, 4096, 1, 0, 0});
  }
  for (uint64_t id = 1; id <= kObjects; ++id) mem.push_back({MemOp::object, 0, 0, 0, id, 0, 65536, 2, 0, 0});
  w.set_memory_events(std::move(mem));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: make_hostile_traces deep-metadata|threads|memory|calls-huge OUT N\n");
    return 2;
  }
  try {
    const std::string kind = argv[1];
    const unsigned long n = std::stoul(argv[3]);
    heaplab::trace::WriterOptions o;
    if (kind == "deep-metadata") {
      o.metadata_json = std::string(n, '[');
    } else if (kind != "threads" && kind != "memory" && kind != "calls-huge") {
      std::fprintf(stderr, "make_hostile_traces: unknown kind '%s'\n", kind.c_str());
      return 2;
    }
    if (kind == "memory" || kind == "calls-huge") o.timestamps = false;
    heaplab::trace::TraceWriter w(argv[2], o);
    if (kind == "memory") {
      write_memory(w, n);
    } else if (kind == "calls-huge") {
      constexpr uint64_t kLag = 2000;
      const uint64_t objects = n / 2;
      for (uint64_t i = 1; i <= objects + kLag; ++i) {
        if (i <= objects) {
          Event m;
          m.op = Op::malloc;
          m.size = 16 + i % 200;
          w.append(m);
        }
        if (i > kLag) {
          Event f;
          f.op = Op::free;
          f.old = i - kLag;
          w.append(f);
        }
      }
      Event huge;
      huge.op = Op::malloc;
      huge.size = uint64_t{1} << 40;
      w.append(huge);
      Event f;
      f.op = Op::free;
      f.old = objects + 1;
      w.append(f);
    } else {
      const unsigned long threads = kind == "threads" ? n : 1;
      for (unsigned long t = 0; t < threads; ++t) {
        Event e;
        e.op = Op::malloc;
        e.size = 8;
        e.thread = uint32_t(t);
        w.append(e);
      }
    }
    w.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_hostile_traces: %s\n", e.what());
    return 1;
  }
  return 0;
}
