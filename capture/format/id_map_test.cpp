// IdMap against a std::map model: ids in order of creation with random
// lifetimes (the window moving past live objects), ids out of order and wild
// ids (a damaged trace), overwrites, clear.
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
void expect_same(IdMap<Val>& m, const std::map<uint64_t, Val>& model) {
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

TEST(IdMap, IdsInOrderWithRandomLifetimesMatchAModel) {
  IdMap<Val> m(64);  // a small window: most long-lived objects leave it
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
  // Ids never made, inside the window and beyond it.
  EXPECT_EQ(m.find(next), nullptr);
  EXPECT_EQ(m.find(next + 1000000), nullptr);
  EXPECT_FALSE(m.erase(next + 5));
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
  for (int i = 0; i < 2000; ++i) {
    const uint64_t k = 1 + rng() % 3000;
    if (rng() % 2) {
      const Val v{rng(), uint32_t(i)};
      EXPECT_EQ(m.put(k, v), model.count(k) == 0) << "id " << k;
      model[k] = v;
    } else {
      EXPECT_EQ(m.erase(k), model.erase(k) == 1) << "id " << k;
    }
  }
  expect_same(m, model);
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

}  // namespace
}  // namespace heaplab
