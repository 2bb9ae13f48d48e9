#include "cli/cli.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "common/files.h"

namespace heaplab::cli {

bool unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == argv[1]) return false;
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  fmt::print(stderr, "heaplab: error: unknown command '{}' (commands: {})\nRun 'heaplab --help' for usage.\n", argv[1],
             names);
  return true;
}

void output_failed() {
  if (errno == EPIPE) return;
  throw Failure{std::string("writing standard output: ") + std::strerror(errno)};
}

int finish_output(int code) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return code;
  if (errno == EPIPE) return code;
  const int e = errno ? errno : EIO;
  fmt::print(stderr, "heaplab: error: writing standard output: {}\n", std::strerror(e));
  return kExitBadInput;
}

std::unique_ptr<trace::TraceReader> open_trace(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  if (!r->complete()) fmt::print(stderr, "heaplab: warning: {}: {}\n", path, r->warning());
  return r;
}

trace::Codec parse_codec(const std::string& codec) {
  return codec == "zstd" ? trace::kCodecZstd : codec == "lz4" ? trace::kCodecLz4 : trace::kCodecNone;
}

int codec_level(trace::Codec codec, int level) {
  int l = level != 0 ? level : codec == trace::kCodecZstd ? 3 : 1;
  if (codec == trace::kCodecZstd && (l < 1 || l > 22))
    throw Failure{"--level: zstd levels are 1 to 22 (got " + std::to_string(l) + ")"};
  return l;
}

void write_text(const std::string& path, const std::string& text, const std::string& prefix) {
  try {
    common::write_text(path, text);
  } catch (const std::runtime_error& e) {
    throw Failure{prefix + e.what()};
  }
}

void write_or_print(const std::string& out, const std::string& text) {
  if (out.empty())
    fmt::print("{}", text);
  else
    write_text(out, text, "");
}

}  // namespace heaplab::cli
