// Tests of InputStream (compression sniffing and decoding) and LineReader.
#include "capture/format/trace_testutil.h"
#include "capture/import/input_stream.h"
#include "capture/import/compress_testutil.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace heaplab::import {
namespace {

namespace fs = std::filesystem;
using trace::testutil::source_dir;
using trace::testutil::TempDir;
using trace::testutil::write_file;

// ---------------------------------------------------------------------------
// Helpers

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

using testutil::Codec;
using testutil::codec_ext;
using testutil::codec_name;
using testutil::compress;

// Reads everything with reads of at most `chunk` bytes.
std::string read_all(InputStream& in, size_t chunk = 4096) {
  std::string out;
  std::vector<char> buf(chunk);
  for (;;) {
    const size_t n = in.read(buf.data(), buf.size());
    if (n == 0) break;
    if (n > chunk) throw std::logic_error("read returned more than asked for");
    out.append(buf.data(), n);
  }
  return out;
}

std::vector<std::string> read_lines(InputStream& in) {
  LineReader lr(in);
  std::vector<std::string> lines;
  std::string_view line;
  while (lr.next(line)) {
    lines.emplace_back(line);
    EXPECT_EQ(lr.line_number(), lines.size());
  }
  EXPECT_FALSE(lr.next(line)) << "next() after the end must stay false";
  return lines;
}

std::vector<std::string> read_lines(const std::string& path) {
  auto in = InputStream::open(path);
  return read_lines(*in);
}

// The lines an ideal splitter makes of `text` ('\n' separated, one trailing
// '\r' stripped, no empty last line after a final '\n').
std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string_view::npos) e = text.size();
    std::string line(text.substr(b, e - b));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    b = e + 1;
  }
  return lines;
}

// Deterministic CMT-like text with random addresses and sizes, which
// compresses poorly enough that the compressed input spans several of the
// stream's 64 KiB read blocks.
std::string sample_text(size_t lines, uint64_t seed = 0x9e3779b97f4a7c15ULL) {
  uint64_t x = seed;
  auto rng = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::string text;
  char buf[96];
  for (size_t i = 0; i < lines; ++i) {
    const uint64_t r = rng();
    switch (r % 4) {
      case 0:
      case 1:
        std::snprintf(buf, sizeof buf, "malloc(%llu) = 0x%llx\n", static_cast<unsigned long long>(rng() % 100000),
                      static_cast<unsigned long long>(rng() >> 16));
        break;
      case 2:
        std::snprintf(buf, sizeof buf, "free(0x%llx)\n", static_cast<unsigned long long>(rng() >> 16));
        break;
      default:
        std::snprintf(buf, sizeof buf, "realloc(0x%llx, %llu) = 0x%llx\n", static_cast<unsigned long long>(rng() >> 16),
                      static_cast<unsigned long long>(rng() % 5000), static_cast<unsigned long long>(rng() >> 16));
        break;
    }
    text += buf;
  }
  return text;
}

bool tool_available(const char* tool) {
  const std::string cmd = std::string("command -v ") + tool + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Expects `fn` to throw InputError; returns its message.
template <typename F>
std::string input_error(F&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return {};
}

bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

// ---------------------------------------------------------------------------
// Every codec

class CodecTest : public ::testing::TestWithParam<Codec> {
 protected:
  Codec codec() const { return GetParam(); }
  // Writes `text` compressed with the codec under test; returns the path.
  std::string write(const std::string& stem, std::string_view text) {
    const std::string path = dir_.file(stem + codec_ext(codec()));
    write_file(path, compress(codec(), text));
    return path;
  }
  TempDir dir_;
};

TEST_P(CodecTest, SniffsTheCompressionAndNamesTheInput) {
  const std::string path = write("sniff", "malloc(1) = 0x10\n");
  auto in = InputStream::open(path);
  EXPECT_STREQ(in->compression(), codec_name(codec()));
  EXPECT_EQ(in->name(), path);
  EXPECT_EQ(read_all(*in), "malloc(1) = 0x10\n");
}

TEST_P(CodecTest, RoundTripsBytesAndLines) {
  const std::string text = sample_text(12000);
  const std::string path = write("round", text);
  if (codec() != Codec::none) {
    EXPECT_GT(fs::file_size(path), 64u << 10) << "want several input blocks";
  }
  {
    auto in = InputStream::open(path);
    EXPECT_EQ(read_all(*in, 1 << 16), text);
    // The end is sticky.
    char c;
    EXPECT_EQ(in->read(&c, 1), 0u);
    EXPECT_EQ(in->read(&c, 1), 0u);
  }
  EXPECT_EQ(read_lines(path), split_lines(text));
}

TEST_P(CodecTest, SmallAndOddReadSizes) {
  const std::string text = sample_text(600, 7);
  const std::string path = write("small", text);
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{7}, size_t{1000}, size_t{(1 << 16) + 1}}) {
    auto in = InputStream::open(path);
    EXPECT_EQ(read_all(*in, chunk), text) << "reads of " << chunk << " bytes";
  }
}

TEST_P(CodecTest, EmptyPayload) {
  const std::string path = write("empty", "");
  auto in = InputStream::open(path);
  EXPECT_STREQ(in->compression(), codec_name(codec()));
  LineReader lr(*in);
  std::string_view line;
  EXPECT_FALSE(lr.next(line));
  EXPECT_FALSE(lr.next(line));
  EXPECT_EQ(lr.line_number(), 0u);
}

TEST_P(CodecTest, LastLineWithoutNewline) {
  const std::string path = write("nonl", "malloc(1) = 0x10\nfree(0x10)");
  EXPECT_EQ(read_lines(path), (std::vector<std::string>{"malloc(1) = 0x10", "free(0x10)"}));
}

TEST_P(CodecTest, CrLfAndEmptyLines) {
  const std::string text = "a\r\n\r\nb\r\n\nc\rd\r\ne\r\r\n  \r\nlast\r";
  const std::string path = write("crlf", text);
  EXPECT_EQ(read_lines(path), (std::vector<std::string>{"a", "", "b", "", "c\rd", "e\r", "  ", "last"}));
}

TEST_P(CodecTest, LinesLongerThanTheBuffer) {
  // The line reader starts with a 64 KiB buffer: lines around and far beyond
  // that size make it move partial lines and grow.
  std::vector<std::string> want;
  std::string text;
  size_t k = 0;
  for (size_t len : {size_t{10}, size_t{(1 << 16) - 1}, size_t{1 << 16}, size_t{(1 << 16) + 1}, size_t{5},
                     size_t{300000}, size_t{0}, size_t{1 << 17}, size_t{3}}) {
    std::string line(len, static_cast<char>('a' + k++ % 26));
    for (size_t i = 0; i < len; i += 997) line[i] = 'X';  // not all one byte
    want.push_back(line);
    text += line;
    text += k % 2 ? "\n" : "\r\n";
  }
  const std::string path = write("long", text);
  EXPECT_EQ(read_lines(path), want);
}

TEST_P(CodecTest, ConcatenatedStreams) {
  // gzip members, bzip2 streams (pbzip2), xz streams and zstd frames may be
  // concatenated; a line may continue across the boundary, and an empty
  // stream in the middle contributes nothing.
  const std::string a = sample_text(3000, 1) + "partial line con";
  const std::string b = "tinues here\n" + sample_text(2000, 2);
  const std::string path = dir_.file(std::string("concat") + codec_ext(codec()));
  write_file(path, compress(codec(), a) + compress(codec(), "") + compress(codec(), b) + compress(codec(), "tail\n"));
  auto in = InputStream::open(path);
  EXPECT_STREQ(in->compression(), codec_name(codec()));
  const std::string all = a + b + "tail\n";
  EXPECT_EQ(read_all(*in), all);
  const auto lines = read_lines(path);
  EXPECT_EQ(lines, split_lines(all));
  EXPECT_EQ(lines.at(3000), "partial line continues here");
}

// The same for the compressed formats only.
class CompressedTest : public CodecTest {};

TEST_P(CompressedTest, ToolMadeFile) {
  // Files as the real command-line tools write them.
  const char* tool = nullptr;
  switch (codec()) {
    case Codec::none:
      FAIL() << "not a compressed format";
    case Codec::gzip:
      tool = "gzip -c -n";
      break;
    case Codec::bzip2:
      tool = "bzip2 -c";
      break;
    case Codec::xz:
      tool = "xz -c";
      break;
    case Codec::zstd:
      tool = "zstd -q -c";
      break;
  }
  const std::string prog(tool, std::string_view(tool).find(' '));
  if (!tool_available(prog.c_str())) GTEST_SKIP() << prog << " is not installed";
  const std::string text = sample_text(8000, 3) + "no newline at the end";
  const std::string plain = dir_.file("tool.txt");
  write_file(plain, text);
  const std::string packed = dir_.file(std::string("tool") + codec_ext(codec()));
  const std::string cmd = std::string(tool) + " < '" + plain + "' > '" + packed + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // The tool's output twice over: a file the tools also accept.
  const std::string twice = dir_.file(std::string("twice") + codec_ext(codec()));
  write_file(twice, slurp(packed) + slurp(packed));

  auto in = InputStream::open(packed);
  EXPECT_STREQ(in->compression(), codec_name(codec()));
  EXPECT_EQ(read_all(*in), text);
  EXPECT_EQ(read_lines(packed), split_lines(text));
  auto in2 = InputStream::open(twice);
  EXPECT_EQ(read_all(*in2, 8191), text + text);
}

TEST_P(CompressedTest, TruncatedFileIsAnError) {
  const std::string text = sample_text(4000, 4);
  const std::string full = compress(codec(), text);
  // Cut points: inside the header (after the 6 bytes sniffed), in the middle
  // of the data, and just before the end (inside the trailer/checksum).
  for (size_t keep : {size_t{7}, size_t{12}, full.size() / 2, full.size() - 4, full.size() - 1}) {
    SCOPED_TRACE("kept " + std::to_string(keep) + " of " + std::to_string(full.size()) + " bytes");
    const std::string path = dir_.file("cut" + std::to_string(keep) + codec_ext(codec()));
    write_file(path, std::string_view(full).substr(0, keep));
    std::string got;
    const std::string msg = input_error([&] {
      auto in = InputStream::open(path);
      EXPECT_STREQ(in->compression(), codec_name(codec()));
      LineReader lr(*in);
      std::string_view line;
      while (lr.next(line)) got.append(line).push_back('\n');
    });
    EXPECT_EQ(msg, path + ": " + codec_name(codec()) + " data ends unexpectedly (truncated file?)");
    // Whatever was delivered before the error is a prefix of the real text.
    EXPECT_EQ(text.compare(0, got.size(), got), 0);
    if (keep == full.size() - 1) {
      // All of the data but the last byte of the trailer decodes first.
      EXPECT_EQ(got, text);
    }
  }
}

TEST_P(CompressedTest, CorruptDataIsAnError) {
  const std::string text = sample_text(4000, 6);
  std::string data = compress(codec(), text);
  // Damage the integrity check that covers the decompressed data (or, for
  // bzip2, the block header), so that every decoder must notice.
  switch (codec()) {
    case Codec::gzip:
      data[data.size() - 8] ^= 0x55;
      break;  // CRC-32 in the trailer
    case Codec::bzip2:
      data[4] ^= 0x55;
      break;  // block magic 0x314159265359
    case Codec::xz:
      data[data.size() / 2] ^= 0x55;
      break;  // LZMA2 data, CRC-64 checked
    case Codec::zstd:
      data[data.size() - 2] ^= 0x55;
      break;  // content checksum
    case Codec::none:
      break;
  }
  const std::string path = dir_.file(std::string("bad") + codec_ext(codec()));
  write_file(path, data);
  const std::string msg = input_error([&] {
    auto in = InputStream::open(path);
    read_all(*in);
  });
  EXPECT_EQ(msg.rfind(path + ": " + codec_name(codec()) + " data is corrupt: ", 0), 0u) << msg;
  EXPECT_FALSE(contains(msg, "\n")) << msg;
}

TEST_P(CompressedTest, GarbageAfterTheSignatureIsAnError) {
  const std::string magic = compress(codec(), "x")
                                .substr(0, codec() == Codec::gzip    ? 2
                                           : codec() == Codec::bzip2 ? 3
                                           : codec() == Codec::xz    ? 6
                                                                     : 4);
  const std::string path = dir_.file(std::string("garbage") + codec_ext(codec()));
  std::string junk = magic;
  for (int i = 0; i < 200; ++i) junk += "\xff\x00 not compressed at all \x13\x37";
  write_file(path, junk);
  const std::string msg = input_error([&] {
    auto in = InputStream::open(path);
    EXPECT_STREQ(in->compression(), codec_name(codec()));
    read_all(*in);
  });
  EXPECT_EQ(msg.rfind(path + ": " + codec_name(codec()) + " data is corrupt: ", 0), 0u) << msg;
}

TEST_P(CompressedTest, TrailingGarbageAfterAValidStreamIsAnError) {
  const std::string path = dir_.file(std::string("trailing") + codec_ext(codec()));
  write_file(path, compress(codec(), "malloc(1) = 0x10\n") + "this is not compressed data\n");
  std::string got;
  const std::string msg = input_error([&] {
    auto in = InputStream::open(path);
    got = read_all(*in, 5);
  });
  EXPECT_TRUE(contains(msg, "corrupt") || contains(msg, "ends unexpectedly")) << msg;
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
}

std::string codec_test_name(const ::testing::TestParamInfo<Codec>& p) { return codec_name(p.param); }

INSTANTIATE_TEST_SUITE_P(input_stream, CodecTest,
                         ::testing::Values(Codec::none, Codec::gzip, Codec::bzip2, Codec::xz, Codec::zstd),
                         codec_test_name);
INSTANTIATE_TEST_SUITE_P(input_stream, CompressedTest,
                         ::testing::Values(Codec::gzip, Codec::bzip2, Codec::xz, Codec::zstd), codec_test_name);

// ---------------------------------------------------------------------------
// Plain files and sniffing

TEST(InputStream, EmptyFile) {
  TempDir dir;
  const std::string path = dir.file("empty.txt");
  write_file(path, "");
  auto in = InputStream::open(path);
  EXPECT_STREQ(in->compression(), "none");
  char buf[16];
  EXPECT_EQ(in->read(buf, sizeof buf), 0u);
  EXPECT_TRUE(read_lines(path).empty());
}

TEST(InputStream, FilesShorterThanTheSniffedPrefix) {
  // Fewer bytes than a signature: plain data, returned unchanged.
  TempDir dir;
  const std::vector<std::string> cases = {"a",
                                          "\n",
                                          "ab\n",
                                          "\x1f",
                                          "BZ",
                                          "BZ\n",
                                          std::string("\xfd"
                                                      "7zXZ",
                                                      5),
                                          "\x28\xb5\x2f",
                                          "12345",
                                          "123456",
                                          "1234567\n"};
  int k = 0;
  for (const std::string& c : cases) {
    const std::string path = dir.file("short" + std::to_string(k++));
    write_file(path, c);
    auto in = InputStream::open(path);
    EXPECT_STREQ(in->compression(), "none") << k;
    EXPECT_EQ(read_all(*in, 1), c) << k;
    EXPECT_EQ(read_lines(path), split_lines(c)) << k;
  }
}

TEST(InputStream, PlainTextIsNotMistakenForCompressed) {
  TempDir dir;
  const std::string path = dir.file("plain.txt");
  const std::string text = "BZ is not bzip2\n\x1f is not gzip\nmalloc(1) = 0x1\n";
  write_file(path, text);
  auto in = InputStream::open(path);
  EXPECT_STREQ(in->compression(), "none");
  EXPECT_EQ(read_all(*in, 2), text);
}

TEST(InputStream, RealBzip2Fixture) {
  const std::string path = source_dir() + "/capture/testdata/cmt/456.hmmer.test.txt.bz2";
  auto in = InputStream::open(path);
  EXPECT_STREQ(in->compression(), "bzip2");
  LineReader lr(*in);
  std::string_view line;
  ASSERT_TRUE(lr.next(line));
  EXPECT_EQ(line, "malloc(56) = 0x800e00000");
  uint64_t n = 1;
  while (lr.next(line)) ++n;
  EXPECT_EQ(n, 180216u);
  EXPECT_EQ(lr.line_number(), 180216u);
}

// ---------------------------------------------------------------------------
// Errors

TEST(InputStream, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("does-not-exist.txt.gz");
  const std::string msg = input_error([&] { InputStream::open(path); });
  EXPECT_EQ(msg.rfind(path + ": cannot open: ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "No such file")) << msg;
  EXPECT_FALSE(contains(msg, "\n")) << msg;
}

TEST(InputStream, DirectoryIsAReadError) {
  TempDir dir;
  const std::string path = dir.file("subdir");
  fs::create_directory(path);
  const std::string msg = input_error([&] {
    auto in = InputStream::open(path);
    read_all(*in);
  });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "read error")) << msg;
}

TEST(InputStream, InputErrorIsARuntimeError) {
  TempDir dir;
  EXPECT_THROW(InputStream::open(dir.file("nope")), std::runtime_error);
}

// ---------------------------------------------------------------------------
// LineReader details

// An in-memory stream handing out data in pieces of a fixed size.
class PiecewiseInput final : public InputStream {
 public:
  PiecewiseInput(std::string data, size_t piece) : data_(std::move(data)), piece_(piece) { name_ = "<pieces>"; }
  size_t read(char* buf, size_t n) override {
    const size_t k = std::min({n, piece_, data_.size() - pos_});
    std::copy_n(data_.data() + pos_, k, buf);
    pos_ += k;
    return k;
  }
  const char* compression() const override { return "none"; }

 private:
  std::string data_;
  size_t piece_;
  size_t pos_ = 0;
};

TEST(InputStreamLineReader, SplitsRegardlessOfHowTheInputArrives) {
  const std::string text = "one\r\ntwo\n\nthree\r\n" + std::string(70000, 'z') + "\nlast";
  for (size_t piece : {size_t{1}, size_t{2}, size_t{5}, size_t{4096}, size_t{1} << 20}) {
    PiecewiseInput in(text, piece);
    EXPECT_EQ(read_lines(in), split_lines(text)) << "pieces of " << piece;
  }
}

TEST(InputStreamLineReader, LineNumbersCountEveryLine) {
  PiecewiseInput in("a\n\n# c\n\nb", 3);
  LineReader lr(in);
  std::string_view line;
  std::vector<std::pair<uint64_t, std::string>> got;
  while (lr.next(line)) got.emplace_back(lr.line_number(), line);
  const std::vector<std::pair<uint64_t, std::string>> want = {{1, "a"}, {2, ""}, {3, "# c"}, {4, ""}, {5, "b"}};
  EXPECT_EQ(got, want);
}

TEST(InputStreamLineReader, ViewStaysValidUntilTheNextCall) {
  const std::string text = sample_text(5000, 11);
  PiecewiseInput in(text, 1000);
  LineReader lr(in);
  std::string_view line;
  const auto want = split_lines(text);
  size_t i = 0;
  while (lr.next(line)) {
    ASSERT_LT(i, want.size());
    const std::string copy(line);  // read through the view before the next call
    EXPECT_EQ(copy, want[i]);
    ++i;
  }
  EXPECT_EQ(i, want.size());
}

TEST(InputStreamLineReader, LineOver64MiBIsAnError) {
  // 65 MiB of one line, as concatenated zstd frames of 1 MiB (cheap to make).
  TempDir dir;
  const std::string path = dir.file("huge.txt.zst");
  const std::string frame = compress(Codec::zstd, std::string(1 << 20, 'x'));
  std::string data = compress(Codec::zstd, "short first line\n");
  for (int i = 0; i < 65; ++i) data += frame;
  write_file(path, data);
  auto in = InputStream::open(path);
  LineReader lr(*in);
  std::string_view line;
  ASSERT_TRUE(lr.next(line));
  EXPECT_EQ(line, "short first line");
  const std::string msg = input_error([&] { lr.next(line); });
  EXPECT_EQ(msg, path + ":2: line longer than 64 MiB");
}

TEST(InputStreamLineReader, VeryLongLineInSmallPieces) {
  // A 32 MiB line arriving in 64 KiB pieces (what PlainStream hands out): the
  // buffer grows to 64 MiB, and each new piece is searched for '\n' once.
  std::string text(32u << 20, 'y');
  text += "\nend\n";
  PiecewiseInput in(std::move(text), 1 << 16);
  LineReader lr(in);
  std::string_view line;
  ASSERT_TRUE(lr.next(line));
  EXPECT_EQ(line.size(), 32u << 20);
  ASSERT_TRUE(lr.next(line));
  EXPECT_EQ(line, "end");
  EXPECT_FALSE(lr.next(line));
}

// ---------------------------------------------------------------------------
// stdin

// Points fd 0 at `path` for the lifetime of the object.
class StdinFrom {
 public:
  explicit StdinFrom(const std::string& path) : saved_(::dup(0)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (saved_ < 0 || fd < 0 || ::dup2(fd, 0) < 0) throw std::runtime_error("cannot redirect stdin");
    ::close(fd);
  }
  ~StdinFrom() {
    ::dup2(saved_, 0);
    ::close(saved_);
  }
  StdinFrom(const StdinFrom&) = delete;
  StdinFrom& operator=(const StdinFrom&) = delete;

 private:
  int saved_;
};

TEST(InputStreamStdin, DashReadsStdinAndSniffsIt) {
  TempDir dir;
  const std::string text = sample_text(3000, 12);
  const std::string path = dir.file("stdin.gz");
  write_file(path, compress(Codec::gzip, text));
  StdinFrom redirect(path);
  auto in = InputStream::open("-");
  EXPECT_EQ(in->name(), "<stdin>");
  EXPECT_STREQ(in->compression(), "gzip");
  EXPECT_EQ(read_lines(*in), split_lines(text));
}

TEST(InputStreamStdin, StdinErrorsNameStdin) {
  TempDir dir;
  const std::string full = compress(Codec::xz, sample_text(1000, 13));
  const std::string path = dir.file("stdin.xz");
  write_file(path, std::string_view(full).substr(0, full.size() / 2));
  StdinFrom redirect(path);
  const std::string msg = input_error([&] {
    auto in = InputStream::open("-");
    read_all(*in);
  });
  EXPECT_EQ(msg.rfind("<stdin>: xz data ", 0), 0u) << msg;
}

// Reading a file shows progress with an ETA on a terminal (here forced:
// HEAPLAB_PROGRESS=1), once the input has been read for 2 s: the file's
// bytes read of its size, on one line cleared when the input is closed.
TEST(InputStream, ProgressOfTheFileRead) {
  TempDir dir;
  const std::string path = dir.file("big.txt");
  write_file(path, std::string(size_t{4} << 20, 'x'));
  const std::string err = dir.file("stderr");
  const int saved = dup(2);
  const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  setenv("HEAPLAB_PROGRESS", "1", 1);
  dup2(fd, 2);
  {
    auto in = InputStream::open(path);
    std::vector<char> buf(1 << 16);
    size_t got = 0;
    while (got < (size_t{1} << 20)) got += in->read(buf.data(), buf.size());
    usleep(2100000);
    while (size_t n = in->read(buf.data(), buf.size())) got += n;
    EXPECT_EQ(got, size_t{4} << 20);
  }
  dup2(saved, 2);
  close(saved);
  close(fd);
  unsetenv("HEAPLAB_PROGRESS");
  const std::string out = trace::testutil::read_file(err);
  EXPECT_EQ(out.rfind("\r\033[Kimporting: ", 0), 0u) << out;
  EXPECT_NE(out.find(" of 4,194,304 bytes), "), std::string::npos) << out;
  EXPECT_NE(out.find(" s left"), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.size() - 4), "\r\033[K") << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 0) << out;
}

}  // namespace
}  // namespace heaplab::import
