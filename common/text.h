// Small text helpers shared by every layer's reports.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace heaplab::common {

// 1234567 -> "1,234,567".
std::string group_digits(uint64_t v);

// Input echoed in an error, quoted: whole if short, else its first `max`
// bytes and its length ("'xxxx...' (10,000,000 bytes)"): a junk line of
// megabytes is not echoed whole. Control bytes are shown as '?'.
std::string excerpt(std::string_view text, size_t max = 60);

// Rows of cells as aligned text, a line each: every column as wide as its
// widest cell (in characters: UTF-8 aware), cells 'l'eft- or 'r'ight-aligned
// as `align` says column by column (missing: left), two spaces between
// columns, `indent` before each line, no blanks at a line's end.
std::string align_columns(const std::vector<std::vector<std::string>>& rows, std::string_view align,
                          std::string_view indent = "");

// Bytes in GiB with one decimal: "37.6 GiB".
std::string gib_text(uint64_t bytes);
// The same from 1 GiB on; below it, in MiB: "9.0 MiB" (where "0.0 GiB"
// would say nothing).
std::string size_text(uint64_t bytes);

// Below this share of the program's peak anonymous memory, and with more
// than kCoverageSlackBytes unexplained, a trace does not explain the
// program's memory, and capture, stats and replay say so. (A small program's
// stacks, libraries' data and its allocator's own metadata are a few MiB the
// replay has too: no warning for those.)
inline constexpr double kCoverageWarning = 0.8;
inline constexpr uint64_t kCoverageSlackBytes = uint64_t{16} << 20;
bool coverage_warns(double coverage, uint64_t explained_bytes, uint64_t program_kib);

// "the trace explains 97% of the program's peak anonymous memory (245.1 of
// 251.2 MiB)", or a warning (coverage_warns).
std::string coverage_text(double coverage, uint64_t explained_bytes, uint64_t program_kib);

// Whether a capture's times had the shim's cost taken off thread by thread
// (normalised by a heaplab from before capture.time_correction): with more
// than one thread, a busy thread's times could sit still while another
// thread wrote. From its metadata: capture.shim_cost_ns (0 if absent or not
// a number), whether capture.time_correction is present, and its threads.
bool times_per_thread(double shim_cost_ns, bool has_time_correction, uint64_t threads);
// "the trace's times had the shim's cost taken off thread by thread (...):
// a busy thread's times could sit still while another thread wrote, and "
// followed by `consequence`.
std::string times_per_thread_text(const std::string& consequence);

}  // namespace heaplab::common
