#include "capture/import/mtrace.h"

#include <charconv>
#include <utility>
#include <string_view>

#include "capture/format/flat_map.h"
#include "capture/format/look_ahead.h"
#include "capture/import/metadata.h"
#include "common/files.h"
#include "common/text.h"

namespace heaplab::import {
namespace {

using trace::Event;
using trace::Op;

// "0x1a2b" (or "(nil)" or "0": 0). False for anything else.
bool hex(std::string_view t, uint64_t& v) {
  if (t == "(nil)" || t == "0") {  // (glibc's %#lx writes zero as a bare 0)
    v = 0;
    return true;
  }
  if (t.size() < 3 || t[0] != '0' || (t[1] != 'x' && t[1] != 'X')) return false;
  const auto r = std::from_chars(t.data() + 2, t.data() + t.size(), v, 16);
  return r.ec == std::errc() && r.ptr == t.data() + t.size();
}

}  // namespace

namespace {

// A call as its lines say it ('<' and '>' joined into one).
struct Call {
  char op;            // '+', '-', '>' or '!'
  uint64_t addr;      // the block made ('+', '>'), freed ('-') or not moved ('!')
  uint64_t old_addr;  // '>': the block it came from ('<')
  uint64_t size;
  uint64_t line;  // its line number
};

// Reads the next call; false at the end. Counts lines, traces and reallocs
// whose '<' has no '>' in `rep`.
bool next_call(LineReader& lines, MtraceImportReport& rep, bool& pending, uint64_t& pending_addr, Call& c) {
  std::string_view line;
  while (lines.next(line)) {
    ++rep.lines;
    auto fail = [&](const std::string& why) { lines.fail(why, line); };
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    if (line[0] == '=') {
      if (line == "= Start")
        ++rep.traces;
      else if (line != "= End")
        fail("expected '= Start' or '= End'");
      continue;
    }
    if (line.size() < 2 || line[0] != '@' || line[1] != ' ')
      fail("expected a call line (@ CALLER + ADDRESS SIZE, - ADDRESS, < ADDRESS, > ADDRESS SIZE or ! ADDRESS SIZE)");
    // The caller may be anything; the call is in the last tokens.
    std::string_view tok[4];
    size_t n = 0, end = line.size();
    while (n < 4 && end > 1) {
      const size_t sp = line.rfind(' ', end - 1);
      if (sp == std::string_view::npos || sp == 0) break;
      if (sp + 1 < end) tok[n++] = line.substr(sp + 1, end - sp - 1);  // last token first
      end = sp;
    }
    // tok[0] is the last token. "+ A S", "> A S", "! A S": op is tok[2]; "- A", "< A": tok[1].
    c = Call{0, 0, 0, 0, lines.line_number()};
    if (n >= 3 && tok[2].size() == 1 && (tok[2][0] == '+' || tok[2][0] == '>' || tok[2][0] == '!')) {
      c.op = tok[2][0];
      if (!hex(tok[1], c.addr) || !hex(tok[0], c.size))
        fail("expected ADDRESS SIZE in hex after '" + std::string(1, c.op) + "'");
    } else if (n >= 2 && tok[1].size() == 1 && (tok[1][0] == '-' || tok[1][0] == '<')) {
      c.op = tok[1][0];
      if (!hex(tok[0], c.addr)) fail("expected an ADDRESS in hex after '" + std::string(1, c.op) + "'");
    } else {
      fail("no call in the line (+, -, <, > or !)");
    }
    if (pending && c.op != '>') {
      ++rep.unpaired_reallocs;  // the "<" block stays live, as nothing says where it went
      pending = false;
    }
    if (c.op == '<') {
      pending = true;
      pending_addr = c.addr;
      continue;
    }
    if (c.op == '>') {
      if (!pending) fail("a '>' line without the '<' line before it");
      pending = false;
      c.old_addr = pending_addr;
    } else if (c.op == '!') {
      c.old_addr = c.addr;
    } else if (c.op == '-' && c.addr == 0) {
      continue;  // (mtrace prints no free(NULL); a hand-made one is nothing)
    }
    return true;
  }
  return false;
}

}  // namespace

MtraceImportReport import_mtrace(InputStream& in, trace::TraceWriter& w) {
  MtraceImportReport rep;
  SplitFlatMap<uint64_t> live;  // address -> object id
  LineReader lines(in);
  bool pending = false;  // a "<" line waits for its ">"
  uint64_t pending_addr = 0;
  const auto take = [&](const Call& c) __attribute__((always_inline)) {
    Event e{};
    uint64_t result = 0;
    switch (c.op) {
      case '+':
        e.op = Op::malloc;
        e.size = c.size;
        result = c.addr;
        if (c.addr == 0) e.flags = trace::kFailed | trace::kNullResult;
        break;
      case '-': {
        uint64_t* id = live.find(c.addr);
        if (!id) {
          if (rep.unknown_frees++ == 0) rep.first_unknown_free_line = c.line;
          return;
        }
        e.op = Op::free;
        e.old = *id;
        live.erase(c.addr);
        break;
      }
      default: {  // '>', '!'
        e.op = Op::realloc;
        e.size = c.size;
        if (c.old_addr != 0) {
          if (uint64_t* id = live.find(c.old_addr)) {
            e.old = *id;
          } else {
            ++rep.unknown_reallocs;  // as realloc(NULL, n): the new block still exists
          }
        }
        if (c.op == '!' || c.addr == 0) {
          e.flags = trace::kFailed | trace::kNullResult;  // the old block stays
        } else {
          result = c.addr;
          if (e.old) live.erase(c.old_addr);
        }
        break;
      }
    }
    if (e.flags & trace::kFailed) ++rep.failed;
    const uint64_t id = w.append(e);
    ++rep.events;
    if (id != 0 && result != 0 && !live.put(result, id)) ++rep.reused_live;
  };
  // Calls are read a few ahead of the one taken, their blocks' entries
  // fetched meanwhile: with millions of blocks live the address table is
  // far larger than the caches, and each lookup missed them
  // (`scripts/bench-import-live.py`). A bad line still stops the import
  // (nothing is written), and the calls are taken in order.
  LookAhead<Call> ahead;
  Call c{};
  try {
    while (next_call(lines, rep, pending, pending_addr, c)) {
      ahead.push_fetching(c, take, live, c.addr, c.old_addr);
    }
  } catch (const InputError&) {
    ahead.drain(take);  // (the calls before a bad line are in the trace, as they were read)
    throw;
  }
  ahead.drain(take);
  if (pending) ++rep.unpaired_reallocs;
  return rep;
}

MtraceFileImport import_mtrace_file(const std::string& input, const std::string& output, trace::WriterOptions opt,
                                    const std::vector<std::string>& command_line) {
  MtraceFileImport r;
  static_cast<ImportedFile&>(r) =
      write_import(input, output, std::move(opt), command_line, "mtrace", [&](InputStream& in, trace::TraceWriter& w) {
        w.set_thread_info(0, {0, "(all threads: mtrace records none)"});
        r.report = import_mtrace(in, w);
        return nlohmann::json{
            {"lines", r.report.lines},
            {"events", r.report.events},
            {"traces", r.report.traces},
            {"unknown_frees", r.report.unknown_frees},
            {"unknown_reallocs", r.report.unknown_reallocs},
            {"reused_live_addresses", r.report.reused_live},
            {"failed", r.report.failed},
            {"unpaired_reallocs", r.report.unpaired_reallocs},
            {"not_recorded", "threads, times, which call made a block (each is a malloc), alignments"}};
      });
  return r;
}

}  // namespace heaplab::import
