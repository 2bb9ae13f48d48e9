#include "common/text.h"

#include <algorithm>
#include <cstdio>

namespace heaplab::common {

std::string align_columns(const std::vector<std::vector<std::string>>& rows, std::string_view align,
                          std::string_view indent) {
  const auto width = [](const std::string& x) {
    size_t n = 0;
    for (char ch : x) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    return n;
  };
  std::vector<size_t> w;
  for (const auto& row : rows) {
    if (w.size() < row.size()) w.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], width(row[i]));
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line(indent);
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string pad(w[i] - width(row[i]), ' ');
      line += i < align.size() && align[i] == 'r' ? pad + row[i] : row[i] + pad;
      line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string gib_text(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(uint64_t{1} << 30));
  return buf;
}

std::string size_text(uint64_t bytes) {
  if (bytes >= uint64_t{1} << 30) return gib_text(bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(uint64_t{1} << 20));
  return buf;
}

std::string group_digits(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  s.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
    s.push_back(digits[i]);
  }
  return s;
}

bool coverage_warns(double coverage, uint64_t explained_bytes, uint64_t program_kib) {
  const uint64_t program = program_kib * 1024;
  return coverage >= 0 && coverage < kCoverageWarning && program > explained_bytes &&
         program - explained_bytes > kCoverageSlackBytes;
}

bool times_per_thread(double shim_cost_ns, bool has_time_correction, uint64_t threads) {
  return shim_cost_ns > 0 && !has_time_correction && threads > 1;
}

std::string times_per_thread_text(const std::string& consequence) {
  return "the trace's times had the shim's cost taken off thread by thread (normalised by a heaplab from before "
         "capture.time_correction): a busy thread's times could sit still while another thread wrote, and " +
         consequence;
}

std::string coverage_text(double coverage, uint64_t explained_bytes, uint64_t program_kib) {
  char buf[512];
  const double mib = double(explained_bytes) / 1048576.0, prog = double(program_kib) / 1024.0;
  if (coverage > 1.05)
    std::snprintf(buf, sizeof buf,
                  "the trace's peak (%.1f MiB requested or mapped) is above the program's sampled peak anonymous "
                  "memory (%.1f MiB): it requests memory it never touches, or ran too briefly to be sampled",
                  mib, prog);
  else if (!coverage_warns(coverage, explained_bytes, program_kib))
    std::snprintf(buf, sizeof buf,
                  "the trace explains %.0f%% of the program's peak anonymous memory (%.1f of %.1f MiB)", 100 * coverage,
                  mib, prog);
  else
    std::snprintf(buf, sizeof buf,
                  "warning: the trace explains only %.0f%% of the program's peak anonymous memory (%.1f of %.1f MiB): "
                  "the rest came from calls heaplab does not see (stacks, static data, shared memory, memory mapped "
                  "before capture started or by direct system calls) or is the allocator's own, and replays of "
                  "other allocators will not show it",
                  100 * coverage, mib, prog);
  return buf;
}

std::string excerpt(std::string_view text, size_t max) {
  std::string out = "'";
  for (char c : text.substr(0, max)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  if (text.size() <= max) return out + "'";
  return out + "...' (" + group_digits(text.size()) + " bytes)";
}

}  // namespace heaplab::common
