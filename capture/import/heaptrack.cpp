#include "capture/import/heaptrack.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <utility>
#include <string_view>
#include <unordered_map>

#include "capture/import/metadata.h"
#include "common/files.h"
#include "common/text.h"

namespace heaplab::import {
namespace {

using trace::Event;
using trace::Op;

// The next space-separated field of `s` from `at`, as hex.
bool hex_field(std::string_view s, size_t& at, uint64_t& v) {
  while (at < s.size() && s[at] == ' ') ++at;
  const auto r = std::from_chars(s.data() + at, s.data() + s.size(), v, 16);
  if (r.ec != std::errc() || r.ptr == s.data() + at) return false;
  at = static_cast<size_t>(r.ptr - s.data());
  return at == s.size() || s[at] == ' ';
}

}  // namespace

HeaptrackImportReport import_heaptrack(InputStream& in, trace::TraceWriter& w) {
  HeaptrackImportReport rep;
  std::vector<uint64_t> kind_size;                           // kind -> size
  std::unordered_map<uint64_t, std::vector<uint64_t>> live;  // kind -> live object ids, newest last
  uint64_t now_ns = 0;
  LineReader lines(in);
  std::string_view line;
  while (lines.next(line)) {
    ++rep.lines;
    auto fail = [&](const std::string& why) { lines.fail(why, line); };
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const char tag = line[0];
    if (line.size() > 1 && line[1] != ' ') fail("expected a one-letter record and a space");
    size_t at = 1;
    uint64_t v = 0;
    switch (tag) {
      case 'v': {
        if (!hex_field(line, at, rep.version) || !hex_field(line, at, rep.file_format))
          fail("expected 'v VERSION FILEFORMAT'");
        if (rep.file_format != 2 && rep.file_format != 3)
          fail("heaptrack file format " + std::to_string(rep.file_format) +
               " is not one heaplab reads (heaptrack 1.2 to 1.4 write 2 and 3)");
        break;
      }
      case 'X':
        rep.command = std::string(line.substr(std::min<size_t>(2, line.size())));
        break;
      case 'a': {
        uint64_t size = 0, trace_index = 0;
        if (!hex_field(line, at, size) || !hex_field(line, at, trace_index)) fail("expected 'a SIZE TRACE' in hex");
        kind_size.push_back(size);
        ++rep.kinds;
        break;
      }
      case '+':
      case '-': {
        if (rep.version == 0) fail("a call before the 'v' line: not a heaptrack recording");
        if (!hex_field(line, at, v) || at != line.size()) fail(std::string("expected '") + tag + " KIND' in hex");
        if (v >= kind_size.size())
          fail("allocation kind " + std::to_string(v) + " not defined by an 'a' line before it");
        Event e{};
        e.time = now_ns;
        if (tag == '+') {
          e.op = Op::malloc;
          e.size = kind_size[v];
          const uint64_t id = w.append(e);
          live[v].push_back(id);
          ++rep.allocations;
        } else {
          auto it = live.find(v);
          if (it == live.end() || it->second.empty()) {
            if (rep.unknown_frees++ == 0) rep.first_unknown_free_line = lines.line_number();
            continue;
          }
          e.op = Op::free;
          e.old = it->second.back();  // the newest live block of the kind: same size, same backtrace
          it->second.pop_back();
          if (it->second.empty()) live.erase(it);
          w.append(e);
          ++rep.deallocations;
        }
        ++rep.events;
        break;
      }
      case 'c': {
        if (!hex_field(line, at, v)) fail("expected 'c MILLISECONDS' in hex");
        if (v > UINT64_MAX / 1000000) fail("a time beyond what 64-bit ns can hold");
        now_ns = std::max(now_ns, v * 1000000);  // never backwards
        ++rep.times;
        break;
      }
      case 'I':
      case 's':
      case 'i':
      case 't':
      case 'R':
      case 'A':
      case 'S':
      case '#':
        break;  // page size, strings, instruction pointers, backtraces, RSS, attached, suppressions, comments
      default:
        if (!std::isalpha(static_cast<unsigned char>(tag))) fail("expected a record letter");
        ++rep.other_records;  // a kind a newer heaptrack writes: not a call
    }
  }
  if (rep.version == 0 && rep.lines > 0) throw InputError(in.name() + ": no 'v' line: not a heaptrack recording");
  return rep;
}

HeaptrackFileImport import_heaptrack_file(const std::string& input, const std::string& output, trace::WriterOptions opt,
                                          const std::vector<std::string>& command_line) {
  HeaptrackFileImport r;
  opt.timestamps = true;  // the "c" lines' ms
  static_cast<ImportedFile&>(r) = write_import(
      input, output, std::move(opt), command_line, "heaptrack", [&](InputStream& in, trace::TraceWriter& w) {
        w.set_thread_info(0, {0, "(all threads: heaptrack records none)"});
        r.report = import_heaptrack(in, w);
        return nlohmann::json{{"lines", r.report.lines},
                              {"events", r.report.events},
                              {"allocations", r.report.allocations},
                              {"deallocations", r.report.deallocations},
                              {"allocation_kinds", r.report.kinds},
                              {"unknown_frees", r.report.unknown_frees},
                              {"heaptrack_version", r.report.version},
                              {"heaptrack_file_format", r.report.file_format},
                              {"recorded_command", r.report.command},
                              {"not_recorded",
                               "threads, failed calls, which call made a block (each is a malloc; a realloc is a "
                               "deallocation then an allocation), which block of a kind a deallocation releases "
                               "(the newest), times finer than 1 ms"}};
      });
  return r;
}

}  // namespace heaplab::import
