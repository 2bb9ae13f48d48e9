#include "common/text.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace heaplab::common {
namespace {

TEST(Text, GibText) {
  EXPECT_EQ(gib_text(0), "0.0 GiB");
  EXPECT_EQ(gib_text(uint64_t{512} << 20), "0.5 GiB");
  EXPECT_EQ(gib_text(uint64_t{1} << 40), "1024.0 GiB");
}

TEST(Text, ExcerptOfLongInput) {
  EXPECT_EQ(excerpt("malloc"), "'malloc'");
  EXPECT_EQ(excerpt(std::string(10000000, 'x'), 5), "'xxxxx...' (10,000,000 bytes)");
  EXPECT_EQ(excerpt(std::string("a\tb\x7f"), 10), "'a?b?'");
}

TEST(Text, AlignColumns) {
  // Widest cell per column (characters, not bytes: "±"), left or right as
  // asked, two spaces between, the indent first, no blanks at the end.
  EXPECT_EQ(align_columns({{"metric", "A", "note"}, {"heap", "1.5 ±2%", ""}, {"wall_s", "12", "worse"}}, "lr", "  "),
            "  metric        A  note\n"
            "  heap    1.5 ±2%\n"
            "  wall_s       12  worse\n");
  EXPECT_EQ(align_columns({}, "l"), "");
}

TEST(Text, GroupDigits) {
  EXPECT_EQ(group_digits(0), "0");
  EXPECT_EQ(group_digits(7), "7");
  EXPECT_EQ(group_digits(999), "999");
  EXPECT_EQ(group_digits(1000), "1,000");
  EXPECT_EQ(group_digits(99999), "99,999");
  EXPECT_EQ(group_digits(100000), "100,000");
  EXPECT_EQ(group_digits(1234567), "1,234,567");
  EXPECT_EQ(group_digits(UINT64_MAX), "18,446,744,073,709,551,615");
}

}  // namespace
}  // namespace heaplab::common
