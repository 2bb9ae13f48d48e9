// The replayer process: maps a plan, runs one thread per replay thread
// against a backend, and writes the result JSON. One executable per backend
// (heaplab-replay for the preload mode and glibc, heaplab-replay-NAME for
// each allocator linked directly), each replayer_main.cpp compiled with the
// backend's header (replay/CMakeLists.txt, heaplab_replayer()), whose main
// is backend_main<Backend>().
//
//   heaplab-replay (TRACE | --plan-fd N) [--threads N] [--touch none|first|pages|all]
//                  [--timing fast|recorded] [--speed X] [--latency N] [--sample-ms N] [--result-fd N]
//                  [--pin none|compact|scatter|LIST] [--membind none|local|interleave|LIST] [--load preload|direct]
//                  [--table-fd N]
//
// `heaplab replay` builds the plan itself and passes it as --plan-fd, so the
// replayer does no decoding. Given a TRACE instead, the replayer builds the
// plan in-process (handy with a hand-written LD_PRELOAD; the decoder's
// scratch memory then comes from the allocator under test).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "replay/engine.h"
#include "replay/settings.h"

namespace heaplab::replay {

using StepsFn = void (*)(const PlanStep*, const PlanStep*, const RunParams&, ThreadResult&);

struct BackendHooks {
  const char* name;
  StepsFn fast;
  StepsFn paced;
  StepsFn fast_timed;  // with latency sampling
  StepsFn paced_timed;
  nlohmann::json (*describe)();
  nlohmann::json (*stats)();
  void (*init)();  // before the replay threads start
};

template <allocators::Backend B>
BackendHooks hooks_of() {
  return {B::kName,
          &run_steps<B, false, false>,
          &run_steps<B, true, false>,
          &run_steps<B, false, true>,
          &run_steps<B, true, true>,
          &B::describe,
          &B::stats,
          &B::init};
}

struct ReplayerArgs {
  std::string trace;  // or
  int plan_fd = -1;
  ReplaySettings settings;  // memory: from the plan
  int result_fd = 1;
  // The object table, written here once the replay is over (heaplab replay
  // --emit-trace, heaplab layout: with a plan that gives every object its
  // own slot, each slot then holds the address its object had).
  int table_fd = -1;
  std::string load = "preload";
  std::string direct_library;  // heaplab-replay only: a custom .so loaded directly
  std::string label;           // the allocator a progress line names (--label; else the backend's name)
};

// Parses the replayer's arguments; throws std::invalid_argument with a
// one-line message.
ReplayerArgs parse_replayer_args(int argc, char** argv);

// Runs the replay; returns the exit status (0, or 2 with a one-line error
// on stderr).
int run_replayer(const ReplayerArgs& args, const BackendHooks& backend);

// main() of a replayer: `select` (optional) picks the backend from the
// arguments. An error goes to the result descriptor as {"error": "..."} when
// that is not stdout (heaplab prints it as its one line), else to stderr;
// the exit status is then 2.
using SelectFn = BackendHooks (*)(const ReplayerArgs&);
int replayer_main(int argc, char** argv, const BackendHooks& backend, SelectFn select = nullptr);

// main() of the replayer of backend B. A backend that can load a custom
// library (allocators::LoadsDirectLibrary: System) runs that library's
// backend instead when given --direct-library PATH.
template <allocators::Backend B>
int backend_main(int argc, char** argv) {
  if constexpr (allocators::LoadsDirectLibrary<B>) {
    return replayer_main(argc, argv, hooks_of<B>(), [](const ReplayerArgs& args) {
      if (args.direct_library.empty()) return hooks_of<B>();
      B::Direct::load(args.direct_library);
      return hooks_of<typename B::Direct>();
    });
  } else {
    return replayer_main(argc, argv, hooks_of<B>());
  }
}

}  // namespace heaplab::replay
