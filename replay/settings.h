// The replay's settings: one type, one table.
//
// `ReplaySettings` is what `heaplab replay` takes on its command line, what
// an experiment's `replay:` section says, and what the replayer process is
// given in its argv: the same struct everywhere, with real enums. The table
// (setting_table()) gives each setting its YAML key, its option, its help,
// its choices or range; every front end (the CLI's options, the YAML
// reader, the replayer's argument parser, the launcher building that argv)
// goes through it, so a setting is named, defaulted and range-checked in
// one place.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace heaplab::replay {

enum class Touch : uint8_t {
  none,      // do not write allocated memory
  first,     // write its first byte
  pages,     // write one byte in every page it spans (RSS as if used)
  all,       // write every byte
  recorded,  // default: as many pages as the program had resident (traces that recorded it, for blocks
             // of 64 KiB and up), else as `pages`
};

enum class Timing : uint8_t {
  fast,      // as fast as possible
  recorded,  // at the recorded pace (divided by speed)
};

struct ReplaySettings {
  uint32_t threads = 0;  // replay threads; 0: one per recorded thread
  Touch touch = Touch::recorded;
  Timing timing = Timing::fast;
  double speed = 1.0;            // with Timing::recorded
  uint32_t latency = 0;          // time every Nth call (0: none)
  bool latency_program = false;  // time the calls the program timed (heaplab capture --latency) instead
  uint32_t sample_ms = 10;       // memory sampling interval (0: start and end only)
  bool memory = true;            // false: no memory measurement (no live-bytes sums, no sampler)
  std::string pin = "none";      // none | compact | scatter | CPU list (replay/pinning.h)
  std::string membind = "none";  // none | local | interleave | NUMA node list

  bool operator==(const ReplaySettings&) const = default;
};

enum class SettingKind : uint8_t {
  count,   // a whole number in [min, max]
  choice,  // one of `choices`
  factor,  // a positive number, at most 1e9
  cpus,    // none, compact, scatter or CPU numbers
  nodes,   // none, local, interleave or NUMA node numbers
  flag,    // on or off (memory; the CLI spells it --no-memory)
};

struct SettingInfo {
  const char* key;     // YAML key and result name: "sample_ms"
  const char* option;  // command-line option: "--sample-ms"
  SettingKind kind;
  const char* help;
  std::vector<std::string> choices;  // choice: the names, in the enum's order
  uint64_t min = 0, max = 0;         // count: the range
};

// Every setting, in the order they are documented.
const std::vector<SettingInfo>& setting_table();
// By YAML key ("sample_ms") or option ("--sample-ms"); nullptr if none.
const SettingInfo* find_setting(std::string_view key_or_option);

// Sets one setting from its text. Returns "" when set, else the reason
// without the setting's name ("expected none, first, pages or all, not
// 'x'", "at most 3600000"); the caller prefixes its own spelling of the name.
std::string set_setting(ReplaySettings& s, const SettingInfo& info, const std::string& value);
// A setting as text, as set_setting reads it.
std::string setting_text(const ReplaySettings& s, const SettingInfo& info);
// The rule across settings: "" or the reason (membind local needs a pin).
std::string check_settings(const ReplaySettings& s);

// The replayer's arguments for these settings (every setting but memory,
// which the plan carries).
std::vector<std::string> to_args(const ReplaySettings& s);

const char* touch_name(Touch t);
const char* timing_name(Timing t);

}  // namespace heaplab::replay
