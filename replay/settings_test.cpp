// Tests of the replay settings' one table: names, defaults, ranges and
// messages, and the replayer's argv written by to_args and read back the way
// the replayer reads it (find_setting + set_setting) to the same settings.
#include "replay/settings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace heaplab::replay {
namespace {

std::string set(ReplaySettings& s, const char* name, const std::string& v) {
  const SettingInfo* i = find_setting(name);
  if (!i) return "no such setting";
  return set_setting(s, *i, v);
}

// What the replayer does with its argv (replay/replayer.cpp).
ReplaySettings read_back(const std::vector<std::string>& args) {
  ReplaySettings s;
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    const SettingInfo* info = find_setting(args[i]);
    EXPECT_NE(info, nullptr) << args[i];
    if (info) {
      EXPECT_EQ(set_setting(s, *info, args[i + 1]), "") << args[i];
    }
  }
  return s;
}

TEST(Settings, OneTableByKeyAndOption) {
  EXPECT_EQ(find_setting("sample_ms"), find_setting("--sample-ms"));
  EXPECT_EQ(find_setting("--bogus"), nullptr);
  std::vector<std::string> keys;
  for (const SettingInfo& i : setting_table()) keys.push_back(i.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"threads", "touch", "timing", "speed", "pin", "membind", "latency",
                                            "latency_of", "sample_ms", "memory"}));
  const ReplaySettings d;
  EXPECT_EQ(d.touch, Touch::recorded);
  EXPECT_EQ(d.timing, Timing::fast);
  EXPECT_EQ(d.sample_ms, 10u);
  EXPECT_TRUE(d.memory);
}

TEST(Settings, ValuesAndTheirMessages) {
  ReplaySettings s;
  EXPECT_EQ(set(s, "touch", "all"), "");
  EXPECT_EQ(s.touch, Touch::all);
  EXPECT_EQ(set(s, "touch", "most"), "expected none, first, pages, all or recorded, not 'most'");
  EXPECT_EQ(set(s, "timing", "slow"), "expected fast or recorded, not 'slow'");
  EXPECT_EQ(set(s, "sample_ms", "3600001"), "at most 3600000");
  EXPECT_EQ(set(s, "sample_ms", "-1"), "not a number: '-1'");
  EXPECT_EQ(set(s, "sample_ms", "5ms"), "not a number: '5ms'");
  EXPECT_EQ(set(s, "latency", "1073741825"), "at most 1073741824");
  EXPECT_EQ(set(s, "threads", "1048577"), "at most 1048576");
  EXPECT_EQ(set(s, "speed", "0"), "expected a positive factor, not '0'");
  EXPECT_EQ(set(s, "speed", "nan"), "expected a positive factor, not 'nan'");
  EXPECT_EQ(set(s, "pin", "0,,1"), "expected none, compact, scatter or a list of CPU numbers such as 0,2, not '0,,1'");
  EXPECT_EQ(set(s, "membind", "near"),
            "expected none, local, interleave or a list of NUMA nodes such as 0,1, not 'near'");
  EXPECT_EQ(set(s, "memory", "off"), "");
  EXPECT_FALSE(s.memory);
  EXPECT_EQ(s.sample_ms, 10u);  // refused values leave the setting as it was
}

TEST(Settings, MembindLocalNeedsAPin) {
  ReplaySettings s;
  s.membind = "local";
  EXPECT_EQ(check_settings(s), "--membind local: binds memory to the nodes of the pinned CPUs; give --pin too");
  s.pin = "compact";
  EXPECT_EQ(check_settings(s), "");
}

TEST(Settings, ReplayerArgvReadsBackToTheSameSettings) {
  ReplaySettings d;
  EXPECT_EQ(to_args(d), (std::vector<std::string>{"--touch", "recorded", "--timing", "fast", "--pin", "none",
                                                  "--membind", "none", "--sample-ms", "10"}));
  ReplaySettings s;
  s.threads = 3;
  s.touch = Touch::first;
  s.timing = Timing::recorded;
  s.speed = 0.30000000000000004;  // the shortest text that reads back the same
  s.latency = 16;
  s.sample_ms = 0;
  s.pin = "0,1";
  s.membind = "interleave";
  const std::vector<std::string> args = to_args(s);
  EXPECT_EQ(args, (std::vector<std::string>{"--threads", "3", "--touch", "first", "--timing", "recorded", "--speed",
                                            "0.30000000000000004", "--pin", "0,1", "--membind", "interleave",
                                            "--latency", "16", "--sample-ms", "0"}));
  EXPECT_EQ(read_back(args), s);
}

}  // namespace
}  // namespace heaplab::replay
