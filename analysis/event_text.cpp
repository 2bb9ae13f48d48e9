#include "analysis/event_text.h"

#include <fmt/format.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

namespace heaplab::analysis {

namespace {

std::string obj(uint64_t id) { return id ? "#" + std::to_string(id) : "NULL"; }

}  // namespace

void event_text(const trace::Event& e, bool has_time, std::string& line, uint64_t address) {
  line.clear();
  fmt::format_to(std::back_inserter(line), "{} t{} ", e.seq, e.thread);
  if (has_time) fmt::format_to(std::back_inserter(line), "@{} ", e.time);
  line += trace::op_name(e.op);
  const uint8_t f = trace::op_info(e.op).fields;
  std::vector<std::string> args;
  const bool produced = (f & trace::kProduces) && e.id != 0;
  const std::string at = address ? fmt::format(" @{:#x}", address) : "";
  if (f & trace::kConsumes) args.push_back(obj(e.old) + (produced ? "" : at));
  if (f & trace::kCount) args.push_back(std::to_string(e.count));
  if (f & trace::kSize) args.push_back(std::to_string(e.size));
  if (f & trace::kAlign) args.push_back("align=" + std::to_string(e.align));
  line += "(";
  for (size_t i = 0; i < args.size(); ++i) line += (i ? ", " : "") + args[i];
  line += ")";
  if (f & trace::kProduces) {
    line += " = " + obj(e.id) + (produced ? at : "");
    if (e.flags & trace::kFailed) line += " (failed)";
  }
  line += "\n";
}

void event_jsonl(const trace::Event& e, bool has_time, std::string& line, uint64_t address) {
  nlohmann::json j = {{"seq", e.seq}, {"thread", e.thread}, {"op", trace::op_name(e.op)}};
  if (has_time) j["time"] = e.time;
  const uint8_t f = trace::op_info(e.op).fields;
  if (f & trace::kConsumes) j["old"] = e.old;
  if (f & trace::kCount) j["count"] = e.count;
  if (f & trace::kSize) j["size"] = e.size;
  if (f & trace::kAlign) j["align"] = e.align;
  if (f & trace::kProduces) j["id"] = e.id;
  if (e.flags & trace::kFailed) j["failed"] = true;
  if (address) j["address"] = address;
  line = j.dump();
  line += "\n";
}

LifetimeAnnotator::Age LifetimeAnnotator::observe(const trace::Event& e) {
  Age a;
  if (trace::op_consumes(e.op) && !(e.flags & trace::kFailed) && e.old != 0) {
    if (auto it = live_.find(e.old); it != live_.end()) {
      a.known = true;
      a.bytes = it->second.bytes;
      a.events = e.seq - it->second.seq;
      a.ns = e.time >= it->second.time ? e.time - it->second.time : 0;
      live_.erase(it);
    }
  }
  if (e.id != 0 && !(e.flags & trace::kFailed)) live_[e.id] = Born{e.seq, e.time, e.requested_bytes()};
  return a;
}

std::string LifetimeAnnotator::text(const Age& a, bool has_time) {
  std::string t = fmt::format("{} bytes, allocated {} lines ago", a.bytes, a.events);
  if (has_time) t += fmt::format(", {} ns ago", a.ns);
  return t;
}

void append_note(std::string& line, const std::string& note) {
  if (!line.empty() && line.back() == '\n') line.pop_back();
  if (line.size() < 49) line.append(49 - line.size(), ' ');
  line += " # " + note + "\n";
}

void LifetimeAnnotator::append(std::string& line, const Age& a, bool has_time) {
  if (a.known) append_note(line, text(a, has_time));
}

void memory_event_jsonl(const trace::MemoryEvent& e, bool has_time, std::string& line) {
  using trace::MemOp;
  line = "{\"op\":\"";
  line += trace::mem_op_name(e.op);
  line += '"';
  auto field = [&](const char* name, uint64_t v) {
    line += ",\"";
    line += name;
    line += "\":";
    line += std::to_string(v);
  };
  if (e.op == MemOp::object) {  // (no place in the order: by object)
    field("object", e.region);
    field("length", e.length);
    field("pages", e.pages);
    line += "}\n";
    return;
  }
  field(e.op == MemOp::latency ? "seq" : "after", e.after);
  field("thread", e.thread);
  if (e.op == MemOp::latency) {
    field("ns", e.length);
    line += "}\n";
    return;
  }
  if (has_time) field("time", e.time);
  field("region", e.region);
  if (e.op != MemOp::map) field("offset", e.offset);
  field("length", e.length);
  if (e.pages != trace::kUnknownPages) field("pages", e.pages);
  if (e.op == MemOp::remap) {
    field("new_region", e.new_region);
    field("new_length", e.new_length);
  }
  line += "}\n";
}

void memory_event_text(const trace::MemoryEvent& e, bool has_time, std::string& line) {
  using trace::MemOp;
  line.clear();
  auto num = [&](uint64_t v) { line += std::to_string(v); };
  if (e.op == MemOp::latency) {
    line += "call ";
    num(e.after);
    line += " t";
    num(e.thread);
    line += ": ";
    num(e.length);
    line += " ns inside the allocator (timed in the program)\n";
    return;
  }
  if (e.op == MemOp::object) {
    line += "object #";
    num(e.region);
    line += ": ";
    num(e.pages);
    line += " pages resident of ";
    num(e.length);
    line += " bytes\n";
    return;
  }
  line += "after ";
  num(e.after);
  line += " t";
  num(e.thread);
  line += ' ';
  if (has_time) {
    line += '@';
    num(e.time);
    line += ' ';
  }
  line += trace::mem_op_name(e.op);
  line += "(region ";
  num(e.region);
  if (e.op != MemOp::map) {
    line += ", offset ";
    num(e.offset);
  }
  line += ", ";
  num(e.length);
  line += " bytes";
  if (e.op != MemOp::map) {
    line += ", ";
    if (e.pages == trace::kUnknownPages)
      line += "? pages";
    else
      num(e.pages), line += " pages";
  }
  line += ')';
  if (e.op == MemOp::remap) {
    line += " -> region ";
    num(e.new_region);
    line += ", ";
    num(e.new_length);
    line += " bytes";
  }
  line += '\n';
}

}  // namespace heaplab::analysis
