// Byte and line input for importers: a file or stdin ("-"), transparently
// decompressed when it starts with a gzip, bzip2, xz or zstd signature.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace heaplab::import {

// An input problem; what() is one line naming the input.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InputStream {
 public:
  // Opens `path` ("-" for stdin) and sniffs its compression. Throws InputError.
  static std::unique_ptr<InputStream> open(const std::string& path);
  virtual ~InputStream() = default;
  // Reads up to n bytes of (decompressed) data; 0 means end of input.
  virtual size_t read(char* buf, size_t n) = 0;
  // "none", "gzip", "bzip2", "xz" or "zstd".
  virtual const char* compression() const = 0;
  const std::string& name() const { return name_; }

 protected:
  std::string name_;
};

// Splits an InputStream into lines ('\n', optional '\r' stripped).
class LineReader {
 public:
  explicit LineReader(InputStream& in) : in_(in) {}
  // Sets `line` to the next line (without its terminator); false at the end.
  // The view is valid until the next call.
  bool next(std::string_view& line);
  uint64_t line_number() const { return line_no_; }
  // Throws InputError "NAME:LINE: WHY: 'an excerpt of line'" for the line
  // last read.
  [[noreturn]] void fail(const std::string& why, std::string_view line) const;

 private:
  InputStream& in_;
  std::vector<char> buf_ = std::vector<char>(1 << 16);
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  uint64_t line_no_ = 0;
};

}  // namespace heaplab::import
