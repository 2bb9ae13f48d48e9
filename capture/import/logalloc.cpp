#include "capture/import/logalloc.h"

#include <cctype>
#include <charconv>
#include <utility>
#include <string_view>
#include <unordered_map>

#include "capture/format/flat_map.h"
#include "capture/format/look_ahead.h"
#include "capture/import/metadata.h"
#include "common/files.h"
#include "common/text.h"

namespace heaplab::import {
namespace {

using trace::Event;
using trace::Op;

bool decimal(std::string_view t, uint64_t& v) {
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v, 10);
  return !t.empty() && r.ec == std::errc() && r.ptr == t.data() + t.size();
}

// A pointer: 0x... hex, (nil), NULL or 0, or "#N" (a munged log's slot:
// kept apart from addresses by the top bit, which no address has).
bool pointer(std::string_view t, uint64_t& v) {
  if (t == "(nil)" || t == "NULL" || t == "0") {
    v = 0;
    return true;
  }
  if (!t.empty() && t[0] == '#') {
    if (!decimal(t.substr(1), v) || v >= (uint64_t{1} << 63)) return false;
    v |= uint64_t{1} << 63;
    return true;
  }
  if (t.size() < 3 || t[0] != '0' || (t[1] != 'x' && t[1] != 'X')) return false;
  const auto r = std::from_chars(t.data() + 2, t.data() + t.size(), v, 16);
  return r.ec == std::errc() && r.ptr == t.data() + t.size();
}

struct Syntax {
  std::string_view name;
  Op op;
  std::string_view args;  // 'p' pointer, 's' size, 'n' count, 'l' alignment, 'r' arena (dropped)
  bool result;
  bool skip = false;  // a call heaplab does not replay
};

constexpr Syntax kCalls[] = {
    {"malloc", Op::malloc, "s", true},
    {"calloc", Op::calloc, "ns", true},
    {"realloc", Op::realloc, "ps", true},
    {"free", Op::free, "p", false},
    {"memalign", Op::memalign, "ls", true},
    {"posix_memalign", Op::posix_memalign, "ls", true},
    {"aligned_alloc", Op::aligned_alloc, "ls", true},
    {"valloc", Op::valloc, "s", true},
    {"moz_arena_malloc", Op::malloc, "rs", true},
    {"moz_arena_calloc", Op::calloc, "rns", true},
    {"moz_arena_realloc", Op::realloc, "rps", true},
    {"moz_arena_free", Op::free, "rp", false},
    {"moz_arena_memalign", Op::memalign, "rls", true},
    {"jemalloc_stats", Op::malloc, "", false, true},
    {"moz_create_arena", Op::malloc, "", true, true},
    {"moz_dispose_arena", Op::malloc, "r", false, true},
};

}  // namespace

LogallocImportReport import_logalloc(InputStream& in, trace::TraceWriter& w) {
  LogallocImportReport rep;
  SplitFlatMap<uint64_t> live;                     // address (or slot) -> object id
  std::unordered_map<uint64_t, uint32_t> threads;  // TID -> thread index
  bool have_pid = false;
  LineReader lines(in);
  // Calls are read a few ahead of the one taken, their addresses' entries
  // fetched meanwhile (look_ahead.h: with millions of blocks live each
  // lookup missed the caches); taken in order, so the trace is the same.
  struct Call {
    Event e;
    uint64_t addr_in, result, line, tid;
    bool has_result;
  };
  const auto take = [&](Call & c) __attribute__((always_inline)) {
    Event& e = c.e;
    if (c.addr_in != 0) {
      if (uint64_t* id = live.find(c.addr_in)) {
        e.old = *id;
      } else if (e.op == Op::free) {
        if (rep.unknown_frees++ == 0) rep.first_unknown_free_line = c.line;
        return;
      } else {
        ++rep.unknown_reallocs;  // as realloc(NULL, n)
      }
    }
    if (c.has_result && c.result == 0) {
      // A NULL result: a failed call, but for realloc(p, 0), which freed p.
      e.flags = trace::kNullResult;
      if (!(e.op == Op::realloc && e.size == 0 && e.old != 0)) e.flags |= trace::kFailed;
    }
    if (e.old != 0 && (e.op == Op::free || !(e.flags & trace::kFailed))) live.erase(c.addr_in);
    auto [it, added] = threads.try_emplace(c.tid, uint32_t(threads.size()));
    if (added) {
      w.set_thread_info(it->second, {c.tid, ""});
      ++rep.threads;
    }
    e.thread = it->second;
    const uint64_t id = w.append(e);
    ++rep.events;
    if (id != 0 && !live.put(c.result, id)) ++rep.reused_live;
  };
  LookAhead<Call> ahead;
  std::string_view line;
  try {
    while (lines.next(line)) {
      ++rep.lines;
      auto fail = [&](const std::string& why) { lines.fail(why, line); };
      while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
      if (line.empty()) continue;
      // PID [TID] call(args)[=result]
      const size_t s1 = line.find(' ');
      if (s1 == std::string_view::npos) fail("expected 'PID TID function(args)=result'");
      uint64_t pid = 0, tid = 0;
      if (!decimal(line.substr(0, s1), pid)) fail("expected a PID first");
      std::string_view rest = line.substr(s1 + 1);
      if (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0]))) {
        const size_t s2 = rest.find(' ');
        if (s2 == std::string_view::npos || !decimal(rest.substr(0, s2), tid)) fail("expected a TID after the PID");
        rest = rest.substr(s2 + 1);
      }
      if (!have_pid) {
        rep.pid = pid;
        have_pid = true;
      } else if (pid != rep.pid) {
        ++rep.other_process_lines;
        continue;
      }
      // The call's ')' is the last before the result's '=' ("(nil)" may be an argument or the result).
      const size_t eq = rest.rfind('=');
      const size_t open = rest.find('(');
      const size_t close = rest.substr(0, eq == std::string_view::npos ? rest.size() : eq).rfind(')');
      if (open == std::string_view::npos || close == std::string_view::npos || close < open)
        fail("expected function(args)");
      const std::string_view name = rest.substr(0, open);
      const Syntax* syn = nullptr;
      for (const Syntax& s : kCalls)
        if (s.name == name) syn = &s;
      if (!syn) fail("unknown function " + common::excerpt(name));
      std::string_view args = rest.substr(open + 1, close - open - 1);
      std::string_view tail = rest.substr(close + 1);
      uint64_t result = 0;
      if (!tail.empty()) {
        if (tail[0] != '=' || !syn->result) fail("unexpected text after the call");
        if (!syn->skip && !pointer(tail.substr(1), result)) fail("expected '=POINTER' after the call");
      } else if (syn->result && !syn->skip) {
        fail("expected '=POINTER' after the call");
      }
      if (syn->skip) {
        ++rep.skipped_calls;
        continue;
      }
      Event e{};
      e.op = syn->op;
      uint64_t addr_in = 0;
      for (size_t k = 0; k < syn->args.size(); ++k) {
        const size_t comma = args.find(',');
        const std::string_view a = args.substr(0, comma);
        if (k + 1 < syn->args.size() && comma == std::string_view::npos) fail("too few arguments");
        args = comma == std::string_view::npos ? std::string_view() : args.substr(comma + 1);
        bool ok = true;
        switch (syn->args[k]) {
          case 'p':
            ok = pointer(a, addr_in);
            break;
          case 's':
            ok = decimal(a, e.size);
            break;
          case 'n':
            ok = decimal(a, e.count);
            break;
          case 'l':
            ok = decimal(a, e.align);
            break;
          case 'r':
            ok = !a.empty();
            break;
        }
        if (!ok) fail("bad argument " + std::to_string(k + 1) + " of " + std::string(name));
      }
      if (!args.empty()) fail("too many arguments");
      if (addr_in == 0 && e.op == Op::free) continue;  // free(NULL): nothing
      if (result != 0 && e.op == Op::calloc && e.count != 0 && e.size > UINT64_MAX / e.count)
        fail("a calloc whose count times size overflows cannot have succeeded");
      ahead.push_fetching({e, addr_in, result, lines.line_number(), tid, syn->result}, take, live, addr_in, result);
    }
  } catch (const InputError&) {
    ahead.drain(take);  // (the calls before a bad line are in the trace, as they were read)
    throw;
  }
  ahead.drain(take);
  return rep;
}

LogallocFileImport import_logalloc_file(const std::string& input, const std::string& output, trace::WriterOptions opt,
                                        const std::vector<std::string>& command_line) {
  LogallocFileImport r;
  static_cast<ImportedFile&>(r) = write_import(
      input, output, std::move(opt), command_line, "logalloc", [&](InputStream& in, trace::TraceWriter& w) {
        r.report = import_logalloc(in, w);
        return nlohmann::json{{"lines", r.report.lines},
                              {"events", r.report.events},
                              {"threads", r.report.threads},
                              {"pid", r.report.pid},
                              {"other_process_lines", r.report.other_process_lines},
                              {"skipped_calls", r.report.skipped_calls},
                              {"unknown_frees", r.report.unknown_frees},
                              {"unknown_reallocs", r.report.unknown_reallocs},
                              {"reused_live_addresses", r.report.reused_live},
                              {"not_recorded", "times, arenas (one heap)"}};
      });
  return r;
}

}  // namespace heaplab::import
