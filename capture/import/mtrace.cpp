#include "capture/import/mtrace.h"

#include <charconv>
#include <utility>
#include <string_view>

#include "capture/format/flat_map.h"
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

MtraceImportReport import_mtrace(InputStream& in, trace::TraceWriter& w) {
  MtraceImportReport rep;
  SplitFlatMap<uint64_t> live;  // address -> object id
  LineReader lines(in);
  std::string_view line;
  bool pending = false;  // a "<" line waits for its ">"
  uint64_t pending_addr = 0;
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
    char op = 0;
    uint64_t addr = 0, size = 0;
    if (n >= 3 && tok[2].size() == 1 && (tok[2][0] == '+' || tok[2][0] == '>' || tok[2][0] == '!')) {
      op = tok[2][0];
      if (!hex(tok[1], addr) || !hex(tok[0], size))
        fail("expected ADDRESS SIZE in hex after '" + std::string(1, op) + "'");
    } else if (n >= 2 && tok[1].size() == 1 && (tok[1][0] == '-' || tok[1][0] == '<')) {
      op = tok[1][0];
      if (!hex(tok[0], addr)) fail("expected an ADDRESS in hex after '" + std::string(1, op) + "'");
    } else {
      fail("no call in the line (+, -, <, > or !)");
    }
    if (pending && op != '>') {
      ++rep.unpaired_reallocs;  // the "<" block stays live, as nothing says where it went
      pending = false;
    }
    Event e{};
    uint64_t result = 0;
    switch (op) {
      case '+':
        e.op = Op::malloc;
        e.size = size;
        result = addr;
        if (addr == 0) e.flags = trace::kFailed | trace::kNullResult;
        break;
      case '-': {
        if (addr == 0) continue;  // (mtrace prints no free(NULL); a hand-made one is nothing)
        uint64_t* id = live.find(addr);
        if (!id) {
          if (rep.unknown_frees++ == 0) rep.first_unknown_free_line = lines.line_number();
          continue;
        }
        e.op = Op::free;
        e.old = *id;
        live.erase(addr);
        break;
      }
      case '<':
        pending = true;
        pending_addr = addr;
        continue;
      case '>':
      case '!': {
        const uint64_t old_addr = op == '>' ? pending_addr : addr;
        if (op == '>' && !pending) fail("a '>' line without the '<' line before it");
        pending = false;
        e.op = Op::realloc;
        e.size = size;
        if (old_addr != 0) {
          if (uint64_t* id = live.find(old_addr)) {
            e.old = *id;
          } else {
            ++rep.unknown_reallocs;  // as realloc(NULL, n): the new block still exists
          }
        }
        if (op == '!' || addr == 0) {
          e.flags = trace::kFailed | trace::kNullResult;  // the old block stays
        } else {
          result = addr;
          if (e.old) live.erase(old_addr);
        }
        break;
      }
    }
    if (e.flags & trace::kFailed) ++rep.failed;
    const uint64_t id = w.append(e);
    ++rep.events;
    if (id != 0 && result != 0 && !live.put(result, id)) ++rep.reused_live;
  }
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
