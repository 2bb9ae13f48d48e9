#include "capture/import/cmt_text.h"

#include <cctype>
#include <charconv>
#include <utility>

#include "capture/format/flat_map.h"
#include "capture/format/look_ahead.h"
#include "capture/import/metadata.h"
#include "common/files.h"
#include "common/text.h"

namespace heaplab::import {
namespace {

using trace::Event;
using trace::Op;

struct Parser {
  std::string_view s;
  size_t i = 0;

  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool ident(std::string_view& out) {
    ws();
    size_t b = i;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
    out = s.substr(b, i - b);
    return i > b;
  }
  bool number(uint64_t& v) {  // decimal, or hex with 0x
    ws();
    const char* b = s.data() + i;
    const char* e = s.data() + s.size();
    int base = 10;
    if (e - b > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X')) {
      b += 2;
      base = 16;
    }
    auto r = std::from_chars(b, e, v, base);
    if (r.ec != std::errc() || r.ptr == b) return false;
    i = static_cast<size_t>(r.ptr - s.data());
    return true;
  }
  // An address: hex with or without 0x, or a NULL spelling; then an optional
  // <tag>. Sets v = 0 for NULL.
  bool address(uint64_t& v) {
    ws();
    for (std::string_view null : {"(nil)", "NULL", "nil"}) {
      if (s.substr(i, null.size()) == null) {
        i += null.size();
        v = 0;
        return true;
      }
    }
    const char* b = s.data() + i;
    const char* e = s.data() + s.size();
    if (e - b > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X')) b += 2;
    auto r = std::from_chars(b, e, v, 16);
    if (r.ec != std::errc() || r.ptr == b) return false;
    i = static_cast<size_t>(r.ptr - s.data());
    if (i < s.size() && s[i] == '<') {
      uint64_t tag;
      ++i;
      if (!number(tag) || !eat('>')) return false;
    }
    return true;
  }
  bool at_end() {
    ws();
    return i == s.size();
  }
};

struct OpSyntax {
  std::string_view name;
  Op op;
  // Argument kinds in order: 'a' address, 's' size, 'n' count, 'l' alignment.
  std::string_view args;
  bool has_result;
};

constexpr OpSyntax kSyntax[] = {
    {"malloc", Op::malloc, "s", true},
    {"calloc", Op::calloc, "ns", true},
    {"realloc", Op::realloc, "as", true},
    {"reallocarray", Op::reallocarray, "ans", true},
    {"free", Op::free, "a", false},
    {"memalign", Op::memalign, "ls", true},
    {"posix_memalign", Op::posix_memalign, "ls", true},
    {"aligned_alloc", Op::aligned_alloc, "ls", true},
    {"valloc", Op::valloc, "s", true},
    {"pvalloc", Op::pvalloc, "s", true},
};

}  // namespace

CmtImportReport import_cmt_text(InputStream& in, trace::TraceWriter& w) {
  CmtImportReport rep;
  SplitFlatMap<uint64_t> live;  // address -> object id
  LineReader lines(in);
  // Calls are read a few ahead of the one taken, their addresses' entries
  // fetched meanwhile (look_ahead.h: with millions of blocks live each
  // lookup missed the caches); taken in order, so the trace is the same.
  struct Call {
    Event e;
    uint64_t addr_in, result, line;
    bool has_result;
  };
  const auto take = [&](Call & c) __attribute__((always_inline)) {
    Event& e = c.e;
    // Map the consumed address to its object.
    if (trace::op_consumes(e.op) && c.addr_in != 0) {
      uint64_t* id = live.find(c.addr_in);
      if (!id) {
        if (e.op == Op::free) {
          if (rep.unknown_frees++ == 0) rep.first_unknown_free_line = c.line;
          return;
        }
        ++rep.unknown_reallocs;  // treat as realloc(NULL, n): the new object still exists
      } else {
        e.old = *id;
      }
    }
    if (c.has_result && c.result == 0) {
      e.flags = trace::kNullResult;
      // realloc(p, 0) returning NULL freed p, as did reallocarray(p, n, s)
      // with n * s == 0; any other NULL is a failure.
      const bool zero_bytes = e.size == 0 || (e.op == Op::reallocarray && e.count == 0);
      const bool freeing_realloc = (e.op == Op::realloc || e.op == Op::reallocarray) && e.old != 0 && zero_bytes;
      if (!freeing_realloc) e.flags |= trace::kFailed;
      ++rep.null_results;
    }
    const bool releases_old = e.old != 0 && (e.op == Op::free || !(e.flags & trace::kFailed));
    if (releases_old) live.erase(c.addr_in);
    const uint64_t id = w.append(e);
    ++rep.events;
    if (id != 0) {
      if (!live.put(c.result, id)) ++rep.reused_live;
    }
  };
  LookAhead<Call> ahead;
  std::string_view line;
  try {
    while (lines.next(line)) {
      ++rep.lines;
      auto fail = [&](const std::string& why) {
        std::string shown(line.substr(0, 80));
        for (char& c : shown)
          if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
        throw InputError(in.name() + ":" + std::to_string(lines.line_number()) + ": " + why + ": \"" + shown +
                         (line.size() > 80 ? "..." : "") + "\"");
      };
      Parser p{line};
      p.ws();
      if (p.i == line.size() || line[p.i] == '#') {
        ++rep.skipped_lines;
        continue;
      }
      std::string_view name;
      if (!p.ident(name)) fail("expected a call such as malloc(16) = 0x1000");
      const OpSyntax* syn = nullptr;
      for (const OpSyntax& s : kSyntax)
        if (s.name == name) syn = &s;
      if (!syn) fail("unknown call " + common::excerpt(name));
      if (!p.eat('(')) fail("expected '(' after " + std::string(name));  // (a known call: short)
      Event e{};
      e.op = syn->op;
      uint64_t addr_in = 0;
      for (size_t k = 0; k < syn->args.size(); ++k) {
        if (k > 0 && !p.eat(',')) fail("expected ',' between arguments");
        bool ok = false;
        switch (syn->args[k]) {
          case 'a':
            ok = p.address(addr_in);
            break;
          case 's':
            ok = p.number(e.size);
            break;
          case 'n':
            ok = p.number(e.count);
            break;
          case 'l':
            ok = p.number(e.align);
            break;
        }
        if (!ok) fail("bad argument " + std::to_string(k + 1) + " of " + std::string(name));
      }
      if (!p.eat(')')) fail("expected ')'");
      uint64_t result = 0;
      if (syn->has_result) {
        if (!p.eat('=') || !p.address(result)) fail("expected '= ADDRESS' after the call");
      }
      if (!p.at_end()) fail("unexpected text after the call");

      ahead.push_fetching({e, addr_in, result, lines.line_number(), syn->has_result}, take, live, addr_in, result);
    }
  } catch (const InputError&) {
    ahead.drain(take);  // (the calls before a bad line are in the trace, as they were read)
    throw;
  }
  ahead.drain(take);
  return rep;
}

CmtFileImport import_cmt_file(const std::string& input, const std::string& output, trace::WriterOptions opt,
                              const std::vector<std::string>& command_line) {
  CmtFileImport r;
  static_cast<ImportedFile&>(r) = write_import(input, output, std::move(opt), command_line, "cmt-text",
                                               [&](InputStream& in, trace::TraceWriter& w) {
                                                 w.set_thread_info(0, {0, "main"});
                                                 r.report = import_cmt_text(in, w);
                                                 return nlohmann::json{{"lines", r.report.lines},
                                                                       {"events", r.report.events},
                                                                       {"unknown_frees", r.report.unknown_frees},
                                                                       {"unknown_reallocs", r.report.unknown_reallocs},
                                                                       {"reused_live_addresses", r.report.reused_live},
                                                                       {"null_results", r.report.null_results}};
                                               });
  return r;
}

}  // namespace heaplab::import
