// The heaplab command's pieces: each group of subcommands registers its
// options and a run() that is a few lines over library calls; main.cpp
// parses and dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capture/format/trace_format.h"
#include "capture/format/trace_reader.h"

namespace heaplab::cli {

inline constexpr int kExitProblems = 1;    // check found problems
inline constexpr int kExitBadInput = 2;    // bad usage or unreadable input
inline constexpr int kExitIncomplete = 3;  // capture: calls are missing (capture stopped on an error)

// A one-line error for the user ("heaplab: error: MESSAGE", exit 2).
struct Failure {
  std::string message;
};

// A subcommand: parsing fills the arguments its options point at; run()
// does the work and returns the exit status.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

// The whole command line, and for `heaplab capture ... -- PROGRAM ARGS`
// what follows `--` (never parsed as heaplab's options).
struct CommandLine {
  std::vector<std::string> argv;
  std::vector<std::string> after_dashes;
  bool dashes = false;
};

// For a count or a position read into an unsigned integer: "-3" would wrap
// to a huge number and be taken silently.
inline CLI::Validator not_negative() {
  return CLI::Validator(
      [](std::string& s) { return s.starts_with("-") ? std::string("not a count: ") + s : std::string(); }, "COUNT");
}

void add_trace_commands(CLI::App& app, Commands& commands, const CommandLine& line);    // import stats check cat
void add_capture_commands(CLI::App& app, Commands& commands, const CommandLine& line);  // capture
void add_replay_commands(CLI::App& app, Commands& commands);                            // replay
void add_experiment_commands(CLI::App& app, Commands& commands);                        // run report dashboard results

// A first argument that is no command and no option: says so on stderr
// ("unknown command 'gaet' (commands: ...)") and returns true. (CLI11 alone
// would say "A subcommand is required", and `heaplab gaet --help` would
// print the main help and exit 0.)
bool unknown_command(CLI::App& app, int argc, char** argv);

// The end of a command: its standard output flushed. A write that failed
// (a full disk, an I/O error) is an error, never silent success: one line
// and exit 2. A reader that went away (EPIPE: `heaplab cat | head`) is not.
int finish_output(int code);
// Throws Failure "writing standard output: REASON" unless errno is EPIPE.
void output_failed();

// Opens a trace, warning on stderr when it is truncated.
std::unique_ptr<trace::TraceReader> open_trace(const std::string& path);
trace::Codec parse_codec(const std::string& codec);
// The codec's level: `level`, or its default (zstd 3, lz4 1); Failure if out of range.
int codec_level(trace::Codec codec, int level);
// Writes `text` to `path` whole; a failure is Failure "PREFIX...".
void write_text(const std::string& path, const std::string& text, const std::string& prefix);
// To standard output if `out` is empty, else write_text.
void write_or_print(const std::string& out, const std::string& text);
// A replay result (heaplab replay -o: tens of KiB) read for `command`, in
// bounded memory (common/json.h's bounds: at most 16 MiB of text, 64
// levels, 1,000,000 values; nlohmann builds a node a value); discarded if
// it is not JSON; Failure "COMMAND: PATH: ..." if it cannot be read, is not
// a regular file or is past the bounds.
nlohmann::json read_result_json(const std::string& path, const std::string& command);

}  // namespace heaplab::cli
