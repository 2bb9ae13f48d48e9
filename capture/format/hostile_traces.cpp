// Writes the hostile inputs scripts/bench-hostile-memory.py measures
// heaplab's commands on (issue 19, memory out of proportion to the input):
//   make_hostile_traces deep-metadata OUT BYTES   a trace whose metadata is BYTES of '['
//   make_hostile_traces threads OUT N             N threads of one malloc each
#include <cstdio>
#include <exception>
#include <string>

#include "capture/format/trace_writer.h"

int main(int argc, char** argv) {
  using heaplab::trace::Event;
  using heaplab::trace::Op;
  if (argc != 4) {
    std::fprintf(stderr, "usage: make_hostile_traces deep-metadata|threads OUT N\n");
    return 2;
  }
  try {
    const std::string kind = argv[1];
    const unsigned long n = std::stoul(argv[3]);
    heaplab::trace::WriterOptions o;
    if (kind == "deep-metadata") {
      o.metadata_json = std::string(n, '[');
    } else if (kind != "threads") {
      std::fprintf(stderr, "make_hostile_traces: unknown kind '%s'\n", kind.c_str());
      return 2;
    }
    heaplab::trace::TraceWriter w(argv[2], o);
    const unsigned long threads = kind == "threads" ? n : 1;
    for (unsigned long t = 0; t < threads; ++t) {
      Event e;
      e.op = Op::malloc;
      e.size = 8;
      e.thread = uint32_t(t);
      w.append(e);
    }
    w.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_hostile_traces: %s\n", e.what());
    return 1;
  }
  return 0;
}
