// LookAhead: items are taken in the order pushed, the oldest once the
// look-ahead is full, and the rest at drain; nothing is taken twice.
#include "capture/format/look_ahead.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace heaplab {
namespace {

TEST(LookAhead, TakesInOrderOnceFullThenTheRestAtDrain) {
  for (const uint64_t n : {0u, 1u, 3u, 4u, 5u, 11u, 1000u}) {
    SCOPED_TRACE(n);
    LookAhead<uint64_t, 4> ahead;
    std::vector<uint64_t> taken;
    const auto take = [&](const uint64_t& v) { taken.push_back(v); };
    for (uint64_t i = 0; i < n; ++i) {
      ahead.push(i, take);
      // Nothing is taken until four wait; then one for each push.
      EXPECT_EQ(taken.size(), i + 1 < 4 ? 0 : i + 1 - 4);
      EXPECT_EQ(ahead.waiting(), std::min<uint64_t>(i + 1, 4));
    }
    ahead.drain(take);
    EXPECT_EQ(ahead.waiting(), 0u);
    ASSERT_EQ(taken.size(), n);
    for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(taken[i], i);
    ahead.drain(take);  // (nothing left)
    EXPECT_EQ(taken.size(), n);
  }
}

// Used again after a drain, it starts from wherever its ring stood.
TEST(LookAhead, PushesAfterADrainStayInOrder) {
  LookAhead<int, 4> ahead;
  std::vector<int> taken;
  const auto take = [&](const int& v) { taken.push_back(v); };
  for (int i = 0; i < 6; ++i) ahead.push(i, take);
  ahead.drain(take);
  for (int i = 6; i < 13; ++i) ahead.push(i, take);
  ahead.drain(take);
  ASSERT_EQ(taken.size(), 13u);
  for (int i = 0; i < 13; ++i) EXPECT_EQ(taken[size_t(i)], i);
}

// Items pushed with `ahead` false are taken at once, after the ones still
// waiting: a table that shrinks back under kLookAheadFrom keeps the order.
// far() looks at the table's size once every 1,024 calls.
TEST(LookAhead, NotAheadTakesTheWaitingFirstThenAtOnce) {
  LookAhead<int, 4> ahead;
  std::vector<int> taken;
  const auto take = [&](const int& v) { taken.push_back(v); };
  for (int i = 0; i < 3; ++i) ahead.push(i, take, true);
  EXPECT_TRUE(taken.empty());
  ahead.push(3, take, false);
  EXPECT_EQ(taken, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ahead.waiting(), 0u);
  ahead.push(4, take, false);
  ahead.push(5, take, true);
  EXPECT_EQ(taken.size(), 5u);
  ahead.drain(take);
  EXPECT_EQ(taken, (std::vector<int>{0, 1, 2, 3, 4, 5}));

  struct Table {
    size_t n;
    size_t size() const { return n; }
  } small{kLookAheadFrom - 1}, big{kLookAheadFrom};
  LookAhead<int> a;
  EXPECT_FALSE(a.far(small));
  for (int i = 1; i < 1024; ++i) EXPECT_FALSE(a.far(big)) << i;  // (not looked at yet)
  EXPECT_TRUE(a.far(big));
  for (int i = 1; i < 1024; ++i) EXPECT_TRUE(a.far(small)) << i;
  EXPECT_FALSE(a.far(small));
}

// A take that throws, in a drain or in a push into a full ring, is not
// taken again; the items after it are.
TEST(LookAhead, AnItemWhoseTakeThrowsIsNotTakenAgain) {
  LookAhead<int, 4> ahead;
  std::vector<int> taken;
  for (int i = 0; i < 3; ++i) ahead.push(i, [&](const int& v) { taken.push_back(v); });
  EXPECT_THROW(ahead.drain([&](const int& v) {
    if (v == 1) throw std::runtime_error("bad");
    taken.push_back(v);
  }),
               std::runtime_error);
  ahead.drain([&](const int& v) { taken.push_back(v); });
  EXPECT_EQ(taken, (std::vector<int>{0, 2}));
  // The same for the oldest taken by a push into a full ring.
  taken.clear();
  for (int i = 0; i < 4; ++i) ahead.push(i, [&](const int& v) { taken.push_back(v); });
  EXPECT_THROW(ahead.push(4, [](const int&) { throw std::runtime_error("bad"); }), std::runtime_error);
  ahead.drain([&](const int& v) { taken.push_back(v); });
  EXPECT_EQ(taken, (std::vector<int>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace heaplab
