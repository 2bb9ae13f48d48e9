#include "replay/settings.h"

#include <charconv>
#include <cerrno>
#include <cstdlib>

namespace heaplab::replay {
namespace {

// "a, b or c"
std::string either(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

// "0,2,5": numbers separated by single commas.
bool list_of_numbers(const std::string& v) {
  return !v.empty() && v.find_first_not_of("0123456789,") == std::string::npos && v.front() != ',' && v.back() != ',' &&
         v.find(",,") == std::string::npos;
}

}  // namespace

const std::vector<SettingInfo>& setting_table() {
  static const std::vector<SettingInfo> table = {
      {"threads",
       "--threads",
       SettingKind::count,
       "Replay threads (default: one per recorded thread, those that never ran at once one after another; as many or "
       "more than ran at once: that many; fewer folds recorded threads)",
       {},
       0,
       1u << 20},
      {"touch",
       "--touch",
       SettingKind::choice,
       "Write allocated memory: recorded (as many pages as the program had resident, where the trace "
       "recorded it; else a byte per page), none, first (byte), pages (a byte per page) or all",
       {"none", "first", "pages", "all", "recorded"}},
      {"timing",
       "--timing",
       SettingKind::choice,
       "fast (as fast as possible) or recorded (the trace's pace)",
       {"fast", "recorded"}},
      {"speed", "--speed", SettingKind::factor, "With --timing recorded: replay this many times faster", {}},
      {"pin",
       "--pin",
       SettingKind::cpus,
       "Bind replay threads (hwloc): none, compact, scatter, or CPU numbers such as 0,1",
       {}},
      {"membind",
       "--membind",
       SettingKind::nodes,
       "Bind the replay's memory (NUMA, hwloc): none, local (the pinned CPUs' nodes), interleave, or node numbers "
       "such as 0,1",
       {}},
      {"latency",
       "--latency",
       SettingKind::count,
       "Time every Nth call (1: all; 0: none, the default) into per-op latency percentiles",
       {},
       0,
       1u << 30},
      {"latency_of",
       "--latency-of",
       SettingKind::choice,
       "Which calls --latency times: every (every Nth) or program (the calls the program timed in the capture, "
       "`heaplab capture --latency N`, for a side-by-side comparison)",
       {"every", "program"}},
      {"sample_ms",
       "--sample-ms",
       SettingKind::count,
       "Sample RSS and live bytes every N ms (0: at the start and the end only)",
       {},
       0,
       3600000},
      {"memory",
       "--memory",
       SettingKind::flag,
       "Memory measurement (sampler, live-bytes sums in the plan); off: wall time and calls only",
       {"off", "on"}},
  };
  return table;
}

const SettingInfo* find_setting(std::string_view name) {
  for (const SettingInfo& i : setting_table())
    if (name == i.key || name == i.option) return &i;
  return nullptr;
}

std::string set_setting(ReplaySettings& s, const SettingInfo& info, const std::string& value) {
  const std::string key = info.key;
  switch (info.kind) {
    case SettingKind::count: {
      char* end = nullptr;
      errno = 0;
      const unsigned long long x = std::strtoull(value.c_str(), &end, 10);
      if (end == value.c_str() || *end || value.empty() || value[0] == '-' || (errno && errno != ERANGE))
        return "not a number: '" + value + "'";
      if (errno == ERANGE) return "at most " + std::to_string(info.max);
      if (x < info.min) return "at least " + std::to_string(info.min);
      if (x > info.max) return "at most " + std::to_string(info.max);
      const auto v = uint32_t(x);
      if (key == "threads")
        s.threads = v;
      else if (key == "latency")
        s.latency = v;
      else
        s.sample_ms = v;
      return "";
    }
    case SettingKind::choice:
    case SettingKind::flag:
      for (size_t k = 0; k < info.choices.size(); ++k) {
        if (value != info.choices[k]) continue;
        if (key == "touch")
          s.touch = Touch(k);
        else if (key == "timing")
          s.timing = Timing(k);
        else if (key == "latency_of")
          s.latency_program = k == 1;
        else
          s.memory = k == 1;
        return "";
      }
      return "expected " + either(info.choices) + ", not '" + value + "'";
    case SettingKind::factor: {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end || !(v > 0) || v > 1e9) return "expected a positive factor, not '" + value + "'";
      s.speed = v;
      return "";
    }
    case SettingKind::cpus:
      if (value != "none" && value != "compact" && value != "scatter" && !list_of_numbers(value))
        return "expected none, compact, scatter or a list of CPU numbers such as 0,2, not '" + value + "'";
      s.pin = value;
      return "";
    case SettingKind::nodes:
      if (value != "none" && value != "local" && value != "interleave" && !list_of_numbers(value))
        return "expected none, local, interleave or a list of NUMA nodes such as 0,1, not '" + value + "'";
      s.membind = value;
      return "";
  }
  return "unknown setting";
}

std::string setting_text(const ReplaySettings& s, const SettingInfo& info) {
  const std::string key = info.key;
  if (key == "threads") return std::to_string(s.threads);
  if (key == "touch") return touch_name(s.touch);
  if (key == "timing") return timing_name(s.timing);
  if (key == "speed") {  // the shortest text that reads back as the same number
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, s.speed);
    return std::string(buf, r.ptr);
  }
  if (key == "latency") return std::to_string(s.latency);
  if (key == "latency_of") return s.latency_program ? "program" : "every";
  if (key == "sample_ms") return std::to_string(s.sample_ms);
  if (key == "memory") return s.memory ? "on" : "off";
  if (key == "pin") return s.pin;
  return s.membind;
}

std::string check_settings(const ReplaySettings& s) {
  if (s.membind == "local" && s.pin == "none")
    return "--membind local: binds memory to the nodes of the pinned CPUs; give --pin too";
  return "";
}

std::vector<std::string> to_args(const ReplaySettings& s) {
  std::vector<std::string> args;
  for (const SettingInfo& i : setting_table()) {
    const std::string key = i.key;
    if (key == "memory") continue;                                 // the plan carries it
    if (key == "speed" && s.timing != Timing::recorded) continue;  // only paced replays have a speed
    if ((key == "latency" || key == "threads") && setting_text(s, i) == "0") continue;  // the default
    if (key == "latency_of" && !s.latency_program) continue;
    args.push_back(i.option);
    args.push_back(setting_text(s, i));
  }
  return args;
}

const char* touch_name(Touch t) {
  switch (t) {
    case Touch::none:
      return "none";
    case Touch::first:
      return "first";
    case Touch::pages:
      return "pages";
    case Touch::all:
      return "all";
    case Touch::recorded:
      return "recorded";
  }
  return "?";
}

const char* timing_name(Timing t) { return t == Timing::recorded ? "recorded" : "fast"; }

}  // namespace heaplab::replay
