#include "cli/cli.h"
#include "common/json.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/files.h"

namespace heaplab::cli {

bool unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  std::string names, near;
  const std::string given = argv[1];
  // Optimal string alignment distance (a swap of two neighbours counts one):
  // 'gaet' is one from 'gate'.
  const auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i)
      for (size_t j = 1; j <= b.size(); ++j) {
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    return d[a.size()][b.size()];
  };
  size_t best = 3;  // suggest only within 2 edits
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == given) return false;
    names += (names.empty() ? "" : ", ") + sub->get_name();
    if (given.size() < 64)
      if (const size_t dist = distance(given, sub->get_name()); dist < best && dist < sub->get_name().size()) {
        best = dist;
        near = sub->get_name();
      }
  }
  fmt::print(stderr, "heaplab: error: unknown command '{}'{} (commands: {})\nRun 'heaplab --help' for usage.\n", given,
             near.empty() ? "" : ", did you mean '" + near + "'?", names);
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

nlohmann::json read_result_json(const std::string& path, const std::string& command) {
  std::string text;
  try {
    text = common::read_input_file(path, "a replay result", common::kJsonMaxBytes);
  } catch (const std::runtime_error& e) {
    throw Failure{command + ": " + e.what()};
  }
  std::string why;
  nlohmann::json j = common::parse_bounded_json(text, &why);
  if (!why.empty()) throw Failure{command + ": " + path + ": not read: " + why};
  return j;
}

}  // namespace heaplab::cli
