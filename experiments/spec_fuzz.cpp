// Fuzz target for experiment files (parse_experiment): the input is the
// YAML text. Rejecting it with SpecError is fine. yaml-cpp's own errors
// are to be converted to SpecError, so any other exception escaping is a
// bug, as is a crash, a sanitizer report, a hang, or a spec that passed
// validation but breaks what validation promises (checked below, abort()).
//   libFuzzer with clang, ASan/UBSan (heaplab_fuzz spec_fuzz)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "experiments/spec.h"
#include "replay/settings.h"

namespace {

using namespace heaplab::experiments;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "spec_fuzz: broken invariant: %s\n", what);
  std::abort();
}

void validated(const ExperimentSpec& s, const std::string& text) {
  check(s.text == text, "the spec's text is not the file's");
  check(!s.name.empty() && s.name.find('/') == std::string::npos, "name empty or with a '/'");
  check(!s.traces.empty(), "no trace");
  for (size_t i = 0; i < s.traces.size(); ++i) {
    const TraceSpec& t = s.traces[i];
    check(!t.name.empty() && t.name.find('/') == std::string::npos, "trace name empty or with a '/'");
    for (size_t j = 0; j < i; ++j) check(s.traces[j].name != t.name, "two traces of one name");
    check(t.capture.empty() || t.file.empty(), "a trace with both a file and a program");
    check(t.file.find("{experiment_dir}") == std::string::npos, "{experiment_dir} left in a trace's file");
    for (const std::string& a : t.capture)
      check(a.find("{experiment_dir}") == std::string::npos, "{experiment_dir} left in a program's argument");
  }
  check(!s.allocators.empty(), "no allocator");
  for (size_t i = 0; i < s.allocators.size(); ++i) {
    const AllocatorSpec& a = s.allocators[i];
    check(!a.name.empty() && !a.label.empty(), "an allocator without a name or label");
    check(a.load == "preload" || a.load == "direct", "an allocator's load mode");
    for (size_t j = 0; j < i; ++j) check(s.allocators[j].label != a.label, "two allocators of one label");
    for (const auto& [k, v] : a.env) check(!k.empty() && k.find('=') == std::string::npos, "an env variable's name");
  }
  check(std::any_of(s.allocators.begin(), s.allocators.end(),
                    [&](const AllocatorSpec& a) { return a.label == s.baseline; }),
        "the baseline is no allocator's label");
  check(s.repetitions >= 1 && s.repetitions <= 10000 && s.warmup <= 1000, "repetitions or warmup out of range");
  // The replay settings: each one reads back from its text as it is (what
  // the replayer's argv and the results store get), and together they pass
  // the replay's own check.
  check(heaplab::replay::check_settings(s.replay).empty(), "replay settings the replay refuses");
  for (const heaplab::replay::SettingInfo& info : heaplab::replay::setting_table()) {
    ReplaySettings again = s.replay;
    check(heaplab::replay::set_setting(again, info, heaplab::replay::setting_text(s.replay, info)).empty(),
          "a replay setting that does not read back from its text");
    check(again == s.replay, "a replay setting that reads back as another value");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    validated(parse_experiment(text, "/fuzz/dir/exp.yaml"), text);
  } catch (const SpecError&) {
    // Rejecting bad input with an error is the expected outcome.
  }
  return 0;
}
