// IdMap against a std::map model: ids in order of creation with random
// lifetimes (the window moving past live objects), ids out of order and wild
// ids (a damaged trace), overwrites, clear; and what moving the window costs
// for ids far apart or hostile.
#include "capture/format/id_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace heaplab {
namespace {

struct Val {
  uint64_t a;
  uint32_t b;
};

// Every entry of the model is found with its value, and for_each visits
// exactly the model's entries.
template <class Map>
void expect_same(Map& m, const std::map<uint64_t, Val>& model) {
  ASSERT_EQ(m.size(), model.size());
  for (const auto& [k, v] : model) {
    const Val* got = m.find(k);
    ASSERT_NE(got, nullptr) << "id " << k;
    EXPECT_EQ(got->a, v.a) << "id " << k;
    EXPECT_EQ(got->b, v.b) << "id " << k;
  }
  std::map<uint64_t, uint64_t> seen;
  m.for_each([&](uint64_t k, const Val& v) { seen[k] += v.a + 1; });
  ASSERT_EQ(seen.size(), model.size());
  for (const auto& [k, v] : model) EXPECT_EQ(seen[k], v.a + 1) << "id " << k;
}

// Ids in order of creation, random lifetimes, through `m` (a window of 64).
template <class Map>
void ids_in_order_with_random_lifetimes(Map& m) {
  std::map<uint64_t, Val> model;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> live;
  uint64_t next = 1;
  for (int step = 0; step < 200000; ++step) {
    if (live.empty() || rng() % 100 < 52) {
      const Val v{rng(), uint32_t(step)};
      EXPECT_TRUE(m.put(next, v));
      model[next] = v;
      live.push_back(next++);
    } else {
      // Mostly the newest objects (short lives), sometimes any.
      const size_t i = rng() % 4 ? live.size() - 1 - rng() % std::min<size_t>(live.size(), 8) : rng() % live.size();
      const uint64_t id = live[i];
      live[i] = live.back();
      live.pop_back();
      Val out{};
      ASSERT_TRUE(m.erase(id, &out)) << "id " << id;
      EXPECT_EQ(out.a, model[id].a);
      model.erase(id);
      EXPECT_EQ(m.find(id), nullptr);
      EXPECT_FALSE(m.erase(id));
    }
    ASSERT_EQ(m.size(), model.size());
  }
  EXPECT_GT(m.outside(), 0u);  // the window moved past live objects
  EXPECT_LT(m.outside(), m.size());
  expect_same(m, model);
  EXPECT_FALSE(m.hashed());
  // Ids made in order scan at most a slot each as the window moves.
  EXPECT_LE(m.scanned(), next);
  // Ids never made: one above the window, and far beyond it.
  EXPECT_EQ(m.find(next), nullptr);
  EXPECT_EQ(m.find(next + 1000000), nullptr);
  EXPECT_FALSE(m.erase(next + 5));
}

TEST(IdMap, IdsInOrderWithRandomLifetimesMatchAModel) {
  IdMap<Val> m(64);  // a small window: most long-lived objects leave it
  ids_in_order_with_random_lifetimes(m);
}

// The same behind a SplitFlatMap (the trace writer's count) whose parts are
// small enough that it splits, its parts doubling alone: the size counted
// outside the window stays right through every move, the split and erases.
TEST(IdMap, BehindASplitFlatMapMatchesAModel) {
  IdMap<Val, SplitFlatMap<Val, 1024>> m(64);
  ids_in_order_with_random_lifetimes(m);
}

TEST(IdMap, AnyKeyWorksOutOfOrderWildAndOverwritten) {
  IdMap<Val> m(16);
  std::map<uint64_t, Val> model;
  std::mt19937_64 rng(11);
  const uint64_t keys[] = {5, 3, 1, 40, 39, 2, 1000, 17, 1ull << 62, 6, UINT64_MAX, 999, 4};
  for (uint64_t k : keys) {
    const Val v{k * 3, uint32_t(k)};
    EXPECT_EQ(m.put(k, v), model.count(k) == 0) << "id " << k;
    model[k] = v;
    expect_same(m, model);
  }
  // Overwrites, in the window and out of it.
  for (uint64_t k : {uint64_t{UINT64_MAX}, uint64_t{3}, uint64_t{1000}}) {
    const Val v{k + 1, 9};
    EXPECT_FALSE(m.put(k, v)) << "id " << k;
    model[k] = v;
  }
  expect_same(m, model);
  // Random keys near a window that moves up as it goes, one in ten far
  // below it (old ids, out of order), and near the end a few wild ones (each
  // moves the window far away: the keys after it are all below it).
  m.clear();
  model.clear();
  m.for_each([](uint64_t k, const Val&) { ADD_FAILURE() << "cleared, but " << k << " is left"; });
  for (int i = 0; i < 4000; ++i) {
    uint64_t k = 1 + uint64_t(i) / 2 + rng() % 40;
    if (rng() % 10 == 0) k = 1 + rng() % (1 + uint64_t(i) / 2);
    if (i > 3900 && rng() % 30 == 0) k = rng() | 1;
    if (rng() % 2) {
      const Val v{rng(), uint32_t(i)};
      EXPECT_EQ(m.put(k, v), model.count(k) == 0) << "id " << k;
      model[k] = v;
    } else {
      EXPECT_EQ(m.erase(k), model.erase(k) == 1) << "id " << k;
    }
  }
  expect_same(m, model);
  EXPECT_GT(m.outside(), 0u);
  m.clear();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.find(3), nullptr);
  EXPECT_TRUE(m.put(3, Val{1, 1}));
  EXPECT_EQ(m.size(), 1u);
}

TEST(IdMap, AWindowThatJumpsFarMovesEveryLiveEntryOut) {
  IdMap<Val> m(16);
  for (uint64_t k = 1; k <= 16; ++k) m.put(k, Val{k, 0});
  EXPECT_EQ(m.outside(), 0u);
  m.put(1u << 20, Val{7, 0});  // the window jumps by far more than its size
  EXPECT_EQ(m.outside(), 16u);
  EXPECT_EQ(m.size(), 17u);
  for (uint64_t k = 1; k <= 16; ++k) {
    ASSERT_NE(m.find(k), nullptr);
    EXPECT_EQ(m.find(k)->a, k);
  }
  EXPECT_TRUE(m.erase(1u << 20));
  EXPECT_TRUE(m.erase(16));
  EXPECT_EQ(m.size(), 15u);
}

TEST(IdMap, TheDefaultWindowKeepsTwoToThe18IdsInTheRing) {
  IdMap<Val> m;
  const uint64_t window = IdMap<Val>::kDefaultWindow;
  ASSERT_EQ(window, uint64_t{1} << 18);
  m.put(1, Val{1, 0});  // lives on
  for (uint64_t k = 2; k <= window; ++k) {
    m.put(k, Val{k, 0});
    m.erase(k);
  }
  EXPECT_EQ(m.outside(), 0u);  // ids 1 .. 2^18: one window
  m.put(window + 1, Val{0, 0});
  EXPECT_EQ(m.outside(), 1u);  // id 1 left it
  ASSERT_NE(m.find(1), nullptr);
  EXPECT_EQ(m.find(1)->a, 1u);
  EXPECT_EQ(IdMap<Val>::for_events(100).size(), 0u);
}

// Ids at the top of the range: the window stops at UINT64_MAX (one that
// wrapped would take key 1 for its own and miss the entry kept for it); key
// 0 (a damaged trace's) is kept as FlatMap keeps it, never in the ring.
TEST(IdMap, TheWindowNeverWrapsPastTheTopAndKeyZeroIsHashed) {
  IdMap<Val> m(64);
  std::map<uint64_t, Val> model;
  for (uint64_t k : {uint64_t{1}, uint64_t{2}, UINT64_MAX - 70, UINT64_MAX - 1, UINT64_MAX}) {
    EXPECT_TRUE(m.put(k, Val{k, 1})) << "id " << k;
    model[k] = Val{k, 1};
    expect_same(m, model);
  }
  EXPECT_FALSE(m.put(1, Val{7, 7}));  // an overwrite, not a second entry
  model[1] = Val{7, 7};
  expect_same(m, model);
  EXPECT_TRUE(m.erase(1));
  EXPECT_EQ(m.find(1), nullptr);
  model.erase(1);
  expect_same(m, model);
  IdMap<Val> z(16);
  z.put(0, Val{1, 1});  // FlatMap keeps no entry for key 0: neither does IdMap
  EXPECT_EQ(z.size(), 0u);
  EXPECT_FALSE(z.erase(0));
}

// Ids far apart (a trace whose ids have gaps): each move of the window scans
// a slot or two, not the ring.
TEST(IdMap, IdsFarApartScanASlotOrTwoEach) {
  IdMap<Val> m(1 << 16);
  std::map<uint64_t, Val> model;
  for (uint64_t i = 1; i <= 20000; ++i) {
    const uint64_t k = i << 20;
    m.put(k, Val{i, 0});
    model[k] = Val{i, 0};
    if (i % 3 == 0) {
      m.erase(k);
      model.erase(k);
    }
  }
  EXPECT_LE(m.scanned(), 2 * 20000u);
  EXPECT_FALSE(m.hashed());
  expect_same(m, model);
}

// A hostile order: each time, an id at the bottom of the window and one at
// its top, then one a window above, so that every move would scan the whole
// ring. The ring is given up after a few and everything is hashed; the map
// still matches the model.
TEST(IdMap, IdsThatMoveTheWindowMoreThanTheyFillItAreHashed) {
  const uint64_t ring = 1 << 12;
  IdMap<Val> m(ring);
  std::map<uint64_t, Val> model;
  uint64_t base = 1;
  for (uint64_t i = 0; i < 2000; ++i) {
    for (uint64_t k : {base, base + ring - 1, base + 2 * ring}) {
      m.put(k, Val{k, uint32_t(i)});
      model[k] = Val{k, uint32_t(i)};
    }
    base += 2 * ring + 1;
  }
  EXPECT_TRUE(m.hashed());
  EXPECT_LE(m.scanned(), 4 * 3 * 2000 + 5 * ring);  // the budget: 4 a put and 4 rings, and one ring more
  expect_same(m, model);
  for (const auto& [k, v] : model) ASSERT_TRUE(m.erase(k)) << "id " << k;
  EXPECT_EQ(m.size(), 0u);
  m.clear();
  EXPECT_FALSE(m.hashed());
  EXPECT_TRUE(m.put(5, Val{5, 5}));
  EXPECT_EQ(m.outside(), 0u);
}

}  // namespace
}  // namespace heaplab
