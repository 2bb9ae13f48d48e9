// The heaplab command: parses arguments and dispatches to the subcommands
// (cli/*_commands.cpp), each a few lines over library calls.
#include <sys/resource.h>

#include <csignal>
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <new>
#include <string>
#include <vector>

#include "capture/format/trace_format.h"
#include "capture/import/metadata.h"
#include "cli/cli.h"

using namespace heaplab;
using namespace heaplab::cli;

int main(int argc, char** argv) {
  signal(SIGCHLD, SIG_DFL);  // an ignored SIGCHLD (inherited) would make every wait for a child fail
  CommandLine line;
  line.argv.assign(argv, argv + argc);
  CLI::App app{"heaplab: capture, normalise and replay heap traces to compare allocators", "heaplab"};
  app.set_version_flag("--version", std::string("heaplab ") + import::tool_version() +
                                        fmt::format(" (trace format {}.{})", trace::kFormatMajor, trace::kFormatMinor));
  app.require_subcommand(1);

  Commands commands;
  add_trace_commands(app, commands, line);
  add_capture_commands(app, commands, line);
  add_replay_commands(app, commands);
  add_experiment_commands(app, commands);

  if (unknown_command(app, argc, argv)) return kExitBadInput;

  // `heaplab capture [options] -- PROGRAM ARGS`: what follows `--` is the
  // program's, never parsed as ours (without `--`, the first argument that is
  // not one of our options starts the program: prefix_command below).
  std::vector<char*> ours(argv, argv + argc);
  if (argc > 1 && std::string(argv[1]) == "capture") {
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "--") {
        line.after_dashes.assign(argv + i + 1, argv + argc);
        ours.resize(size_t(i));
        line.dashes = true;
        break;
      }
  }

  try {
    app.parse(int(ours.size()), ours.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "heaplab: error: {}\nRun 'heaplab --help' for usage.\n", e.what());
    return kExitBadInput;
  }

  try {
    for (const Command& c : commands)
      if (*c.app) return finish_output(c.run());
  } catch (const Failure& f) {
    fmt::print(stderr, "heaplab: error: {}\n", f.message);
  } catch (const std::bad_alloc&) {
    // (Often a limit of this shell's, not the machine's: say which.)
    rlimit as{};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
      fmt::print(stderr,
                 "heaplab: error: out of memory: this process may map at most {} MiB (ulimit -v {}); raise the "
                 "limit, or see --help for options that need less\n",
                 as.rlim_cur >> 20, as.rlim_cur >> 10);
    else
      fmt::print(stderr, "heaplab: error: out of memory (the machine has too little available for this command)\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "heaplab: error: {}\n", e.what());
  }
  return kExitBadInput;
}
