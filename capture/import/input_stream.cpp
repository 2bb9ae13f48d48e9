#include "capture/import/input_stream.h"

#include "common/progress.h"
#include "common/text.h"

#include <bzlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <lzma.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace heaplab::import {
namespace {

constexpr size_t kBlock = 1 << 16;

// Raw bytes from a file descriptor, with the first bytes kept for sniffing.
// Reading a regular file shows progress with an ETA on a terminal
// (common::Progress: the file's bytes read, compressed or not, of its size),
// cleared when the input is closed.
class FdInput {
 public:
  FdInput(const std::string& path) : name_(path) {
    if (path == "-") {
      fd_ = 0;
      owned_ = false;
    } else {
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) throw InputError(path + ": cannot open: " + std::strerror(errno));
    }
    struct stat st {};
    if (fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
      progress_.emplace("importing", uint64_t(st.st_size), "bytes");
  }
  ~FdInput() {
    if (owned_ && fd_ >= 0) ::close(fd_);
  }
  size_t read(char* buf, size_t n) {
    for (;;) {
      ssize_t r = ::read(fd_, buf, n);
      if (r > 0 && progress_) progress_->update(read_ += uint64_t(r));
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      throw InputError(name_ + ": read error: " + std::strerror(errno));
    }
  }
  // Fills buf with up to n bytes, looping over short reads.
  size_t read_full(char* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
      size_t r = read(buf + got, n - got);
      if (r == 0) break;
      got += r;
    }
    return got;
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool owned_ = true;
  uint64_t read_ = 0;
  std::optional<common::Progress> progress_;
};

// Base for the streams: compressed input is read through `in_buf`, which
// starts out holding the sniffed prefix.
class Stream : public InputStream {
 public:
  Stream(std::unique_ptr<FdInput> fd, std::string name, std::vector<char> prefix)
      : fd_(std::move(fd)), in_buf_(std::move(prefix)) {
    name_ = std::move(name);
    in_len_ = in_buf_.size();
    in_buf_.resize(std::max(in_buf_.size(), kBlock));
  }

 protected:
  // Makes input available in [in_buf_+in_pos_, in_buf_+in_len_); false at EOF.
  bool fill() {
    if (in_pos_ < in_len_) return true;
    in_pos_ = 0;
    in_len_ = fd_->read(in_buf_.data(), in_buf_.size());
    return in_len_ != 0;
  }
  [[noreturn]] void bad(const std::string& what) const {
    throw InputError(name_ + ": " + compression() + " data is corrupt: " + what);
  }
  [[noreturn]] void truncated() const {
    throw InputError(name_ + ": " + compression() + " data ends unexpectedly (truncated file?)");
  }
  std::unique_ptr<FdInput> fd_;
  std::vector<char> in_buf_;
  size_t in_pos_ = 0, in_len_ = 0;
};

class PlainStream final : public Stream {
 public:
  using Stream::Stream;
  size_t read(char* buf, size_t n) override {
    if (!fill()) return 0;
    size_t k = std::min(n, in_len_ - in_pos_);
    std::memcpy(buf, in_buf_.data() + in_pos_, k);
    in_pos_ += k;
    return k;
  }
  const char* compression() const override { return "none"; }
};

class GzipStream final : public Stream {
 public:
  GzipStream(std::unique_ptr<FdInput> fd, std::string name, std::vector<char> prefix)
      : Stream(std::move(fd), std::move(name), std::move(prefix)) {
    if (inflateInit2(&z_, 15 + 32) != Z_OK) throw InputError(name_ + ": cannot start zlib");
  }
  ~GzipStream() override { inflateEnd(&z_); }
  size_t read(char* buf, size_t n) override {
    z_.next_out = reinterpret_cast<Bytef*>(buf);
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out == n && !done_) {
      const bool more = fill();
      if (!more && !in_stream_) {
        done_ = true;
        break;
      }
      in_stream_ = true;
      z_.next_in = reinterpret_cast<Bytef*>(in_buf_.data() + in_pos_);
      z_.avail_in = static_cast<uInt>(in_len_ - in_pos_);
      const uInt before = z_.avail_out;
      int rc = inflate(&z_, Z_NO_FLUSH);
      in_pos_ = in_len_ - z_.avail_in;
      if (rc == Z_STREAM_END) {
        in_stream_ = false;
        inflateReset(&z_);  // a further member may follow (concatenated gzip)
      } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
        if (!more && z_.avail_out == before) truncated();
      } else {
        bad(z_.msg ? z_.msg : "inflate error");
      }
    }
    return n - z_.avail_out;
  }
  const char* compression() const override { return "gzip"; }

 private:
  z_stream z_{};
  bool in_stream_ = false, done_ = false;
};

class Bzip2Stream final : public Stream {
 public:
  Bzip2Stream(std::unique_ptr<FdInput> fd, std::string name, std::vector<char> prefix)
      : Stream(std::move(fd), std::move(name), std::move(prefix)) {
    init();
  }
  ~Bzip2Stream() override { BZ2_bzDecompressEnd(&bz_); }
  size_t read(char* buf, size_t n) override {
    bz_.next_out = buf;
    bz_.avail_out = static_cast<unsigned>(n);
    while (bz_.avail_out == n && !done_) {
      const bool more = fill();
      if (!more && !in_stream_) {
        done_ = true;
        break;
      }
      in_stream_ = true;
      bz_.next_in = in_buf_.data() + in_pos_;
      bz_.avail_in = static_cast<unsigned>(in_len_ - in_pos_);
      const unsigned before = bz_.avail_out;
      int rc = BZ2_bzDecompress(&bz_);
      in_pos_ = in_len_ - bz_.avail_in;
      if (rc == BZ_STREAM_END) {
        in_stream_ = false;
        char* out = bz_.next_out;  // a further stream may follow (pbzip2)
        const unsigned avail = bz_.avail_out;
        BZ2_bzDecompressEnd(&bz_);
        init();
        bz_.next_out = out;
        bz_.avail_out = avail;
      } else if (rc == BZ_OK) {
        if (!more && bz_.avail_out == before) truncated();
      } else {
        bad("bzip2 error " + std::to_string(rc));
      }
    }
    return n - bz_.avail_out;
  }
  const char* compression() const override { return "bzip2"; }

 private:
  void init() {
    bz_ = bz_stream{};
    if (BZ2_bzDecompressInit(&bz_, 0, 0) != BZ_OK) throw InputError(name_ + ": cannot start bzip2");
  }
  bz_stream bz_{};
  bool in_stream_ = false, done_ = false;
};

class XzStream final : public Stream {
 public:
  XzStream(std::unique_ptr<FdInput> fd, std::string name, std::vector<char> prefix)
      : Stream(std::move(fd), std::move(name), std::move(prefix)) {
    if (lzma_stream_decoder(&s_, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK)
      throw InputError(name_ + ": cannot start the xz decoder");
  }
  ~XzStream() override { lzma_end(&s_); }
  size_t read(char* buf, size_t n) override {
    if (done_) return 0;
    s_.next_out = reinterpret_cast<uint8_t*>(buf);
    s_.avail_out = n;
    while (s_.avail_out == n && !done_) {
      lzma_action action = LZMA_RUN;
      if (!fill()) action = LZMA_FINISH;
      s_.next_in = reinterpret_cast<const uint8_t*>(in_buf_.data() + in_pos_);
      s_.avail_in = in_len_ - in_pos_;
      lzma_ret rc = lzma_code(&s_, action);
      in_pos_ = in_len_ - s_.avail_in;
      if (rc == LZMA_STREAM_END) {
        done_ = true;
      } else if (rc == LZMA_BUF_ERROR && action == LZMA_FINISH) {
        truncated();
      } else if (rc != LZMA_OK) {
        bad("xz error " + std::to_string(rc));
      }
    }
    return n - s_.avail_out;
  }
  const char* compression() const override { return "xz"; }

 private:
  lzma_stream s_ = LZMA_STREAM_INIT;
  bool done_ = false;
};

class ZstdStream final : public Stream {
 public:
  ZstdStream(std::unique_ptr<FdInput> fd, std::string name, std::vector<char> prefix)
      : Stream(std::move(fd), std::move(name), std::move(prefix)), d_(ZSTD_createDStream()) {
    if (!d_) throw InputError(name_ + ": cannot start zstd");
  }
  ~ZstdStream() override { ZSTD_freeDStream(d_); }
  size_t read(char* buf, size_t n) override {
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos == 0) {
      const bool more = fill();
      ZSTD_inBuffer in{in_buf_.data(), in_len_, in_pos_};
      const size_t hint = ZSTD_decompressStream(d_, &out, &in);
      in_pos_ = in.pos;
      if (ZSTD_isError(hint)) bad(ZSTD_getErrorName(hint));
      if (!more && out.pos == 0) {
        // Judge by the last call that did something: once a frame is done, a
        // call without input returns the header size of a next frame, not 0.
        if (last_hint_ != 0) truncated();
        return 0;
      }
      last_hint_ = hint;  // 0: the last frame so far is complete and flushed
    }
    return out.pos;
  }
  const char* compression() const override { return "zstd"; }

 private:
  ZSTD_DStream* d_;
  size_t last_hint_ = 0;
};

}  // namespace

std::unique_ptr<InputStream> InputStream::open(const std::string& path) {
  auto fd = std::make_unique<FdInput>(path);
  std::vector<char> prefix(6);
  prefix.resize(fd->read_full(prefix.data(), prefix.size()));
  const std::string name = path == "-" ? "<stdin>" : path;
  auto starts = [&](std::string_view sig) {
    return prefix.size() >= sig.size() && std::memcmp(prefix.data(), sig.data(), sig.size()) == 0;
  };
  if (starts("\x1f\x8b")) return std::make_unique<GzipStream>(std::move(fd), name, prefix);
  if (starts("BZh")) return std::make_unique<Bzip2Stream>(std::move(fd), name, prefix);
  if (starts(std::string_view("\xfd"
                              "7zXZ\0",
                              6)))
    return std::make_unique<XzStream>(std::move(fd), name, prefix);
  if (starts("\x28\xb5\x2f\xfd")) return std::make_unique<ZstdStream>(std::move(fd), name, prefix);
  return std::make_unique<PlainStream>(std::move(fd), name, prefix);
}

void LineReader::fail(const std::string& why, std::string_view line) const {
  throw InputError(in_.name() + ":" + std::to_string(line_no_) + ": " + why + ": " + common::excerpt(line));
}

bool LineReader::next(std::string_view& line) {
  size_t scanned = 0;  // bytes after begin_ already known to hold no '\n'
  for (;;) {
    const char* start = buf_.data() + begin_;
    const void* nl = std::memchr(start + scanned, '\n', end_ - begin_ - scanned);
    if (nl) {
      size_t len = static_cast<const char*>(nl) - start;
      line = std::string_view(start, len);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      begin_ += len + 1;
      ++line_no_;
      return true;
    }
    if (eof_) {
      if (begin_ == end_) return false;
      line = std::string_view(start, end_ - begin_);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      begin_ = end_;
      ++line_no_;
      return true;
    }
    // Move the partial line to the front; grow when one line fills the buffer.
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buf_.size()) {
      if (buf_.size() >= (64u << 20))
        throw InputError(in_.name() + ":" + std::to_string(line_no_ + 1) + ": line longer than 64 MiB");
      buf_.resize(buf_.size() * 2);
    }
    scanned = end_ - begin_;
    size_t r = in_.read(buf_.data() + end_, buf_.size() - end_);
    if (r == 0) eof_ = true;
    end_ += r;
  }
}

}  // namespace heaplab::import
