// FlatMap against a std::map model: random puts, finds, try_inserts and
// erases over a small key range (long probe runs, erases shifting entries
// back across the table's end), through the table's growth.
#include "capture/format/flat_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace heaplab {
namespace {

template <class Map, class Check = void (*)(const Map&)>
void random_operations_match_a_model(Check check = [](const Map&) {}) {
  Map m;
  std::map<uint64_t, uint64_t> model;
  std::mt19937_64 rng(42);
  for (int step = 0; step < 200000; ++step) {
    // Keys from a few thousand, and now and then the top of the range.
    const uint64_t key = rng() % 8 == 0 ? UINT64_MAX - rng() % 16 : 1 + rng() % 3000;
    switch (rng() % 4) {
      case 0:
        EXPECT_EQ(m.put(key, uint64_t(step)), model.count(key) == 0) << "step " << step;
        model[key] = uint64_t(step);
        break;
      case 1: {
        const auto [value, fresh] = m.try_insert(key);
        ASSERT_NE(value, nullptr);
        EXPECT_EQ(fresh, model.count(key) == 0) << "step " << step;
        if (fresh) {
          EXPECT_EQ(*value, 0u);  // value-initialised
          *value = uint64_t(step) + 1000000;
          model[key] = *value;
        } else {
          EXPECT_EQ(*value, model[key]) << "step " << step;
        }
        break;
      }
      case 2: {
        uint64_t old = 0;
        const bool had = model.count(key) != 0;
        EXPECT_EQ(m.erase(key, &old), had) << "step " << step;
        if (had) {
          EXPECT_EQ(old, model[key]);
        }
        model.erase(key);
        break;
      }
      default: {
        const uint64_t* v = m.find(key);
        ASSERT_EQ(v != nullptr, model.count(key) != 0) << "step " << step;
        if (v) {
          EXPECT_EQ(*v, model[key]);
        }
      }
    }
    ASSERT_EQ(m.size(), model.size()) << "step " << step;
  }
  size_t seen = 0;
  m.for_each([&](uint64_t k, uint64_t v) {
    ++seen;
    EXPECT_EQ(model.at(k), v);
  });
  EXPECT_EQ(seen, model.size());
  check(m);
}

TEST(FlatMap, RandomOperationsMatchAModel) { random_operations_match_a_model<FlatMap<uint64_t>>(); }
TEST(FlatMap, RandomOperationsMatchAModelAtALoadOf3Quarters) {
  random_operations_match_a_model<FlatMap<uint64_t, 6>>();
}
TEST(SplitFlatMap, RandomOperationsMatchAModel) { random_operations_match_a_model<SplitFlatMap<uint64_t>>(); }
// Parts of 1 KiB: the model's 3,000-odd keys split it into 16 parts early on.
TEST(SplitFlatMap, RandomOperationsMatchAModelInParts) {
  using Map = SplitFlatMap<uint64_t, 1024>;
  random_operations_match_a_model<Map>([](const Map& m) { EXPECT_TRUE(m.split()); });
}

// A SplitFlatMap is one table at a load of up to 3/4 until its parts
// would be 2 MiB each (16 parts), then 16 at a load of 3/8 to 3/4 (never
// two tables of the whole map at once after that: a part doubles alone), so
// its tables take at most 16/(3/8) bytes an entry where a FlatMap's take up
// to 16/(1/4); every entry is found, and erasing them all leaves it empty.
// At 1,572,864 entries (a part's doubling point on average) some parts have
// doubled to 4 MiB and some not: the room is between the two, where a
// FlatMap's is 64 MiB.
TEST(SplitFlatMap, OneTableThenPartsBetween3EighthsAnd3QuartersFull) {
  SplitFlatMap<uint64_t> m;
  FlatMap<uint64_t> one;
  FlatMap<uint64_t, 6> three_quarters;
  constexpr uint64_t kN = 1572864, kSplitAt = (uint64_t{1} << 20) / 4 * 3 + 1;  // 16 MiB of 16-byte entries
  for (uint64_t k = 1; k <= kN; ++k) {
    ASSERT_TRUE(m.put(k << 4, k));  // addresses: 16-byte aligned
    one.put(k << 4, k);
    if (k < kSplitAt) {
      three_quarters.put(k << 4, k);
      ASSERT_FALSE(m.split()) << k;
    } else {
      ASSERT_TRUE(m.split()) << k;
    }
    if (k == kSplitAt - 1) {
      EXPECT_EQ(m.table_bytes(), three_quarters.table_bytes() + 15 * 16 * 16);  // (the other parts' first tables)
    }
  }
  EXPECT_EQ(m.size(), kN);
  EXPECT_GT(m.table_bytes(), size_t{32} << 20);
  EXPECT_LT(m.table_bytes(), size_t{64} << 20);
  EXPECT_LE(m.table_bytes(), kN * 16 * 8 / 3);
  EXPECT_GE(m.table_bytes(), kN * 16 * 4 / 3);
  EXPECT_EQ(one.table_bytes(), size_t{64} << 20);
  EXPECT_EQ(m.largest_part_bytes(), size_t{4} << 20);
  for (uint64_t k = 1; k <= kN; ++k) {
    const uint64_t* v = m.find(k << 4);
    ASSERT_NE(v, nullptr) << k;
    ASSERT_EQ(*v, k);
  }
  EXPECT_EQ(m.find(uint64_t{kN + 1} << 4), nullptr);
  for (uint64_t k = 1; k <= kN; ++k) ASSERT_TRUE(m.erase(k << 4));
  EXPECT_EQ(m.size(), 0u);
  size_t left = 0;
  m.for_each([&](uint64_t, uint64_t) { ++left; });
  EXPECT_EQ(left, 0u);
  m.clear();
  EXPECT_FALSE(m.split());
  EXPECT_EQ(m.table_bytes(), 16 * 16 * 16u);  // every table given back for one of 16 entries
  EXPECT_EQ(m.find(16), nullptr);
}

// Keys that all fall in one part (a crafted trace's addresses can) when the
// one table splits: that part doubles as they come (it would have had room
// for a sixteenth of them), and every key is found.
TEST(SplitFlatMap, KeysCrowdingIntoOnePartAtTheSplit) {
  using Map = SplitFlatMap<uint64_t, 1024>;  // splits from 512 entries on
  Map m;
  std::vector<uint64_t> keys;
  for (uint64_t a = 16; keys.size() < 5000; a += 16)
    if (Map::part_of(a) == 0) keys.push_back(a);
  for (const uint64_t k : keys) ASSERT_TRUE(m.put(k, k + 1));
  EXPECT_TRUE(m.split());
  EXPECT_EQ(m.size(), keys.size());
  for (const uint64_t k : keys) {
    const uint64_t* v = m.find(k);
    ASSERT_NE(v, nullptr) << k;
    EXPECT_EQ(*v, k + 1);
  }
  EXPECT_EQ(m.largest_part_bytes(), m.table_bytes() - 15 * 64 * 16);  // the others as the split made them
}

// try_insert grows the table as put does: a pointer it returns is into the
// table as it is after the growth.
TEST(FlatMap, TryInsertThroughGrowth) {
  FlatMap<uint64_t> m;
  for (uint64_t k = 1; k <= 100000; ++k) {
    const auto [v, fresh] = m.try_insert(k * 0x9e3779b97f4a7c15ULL);
    ASSERT_TRUE(fresh);
    *v = k;
  }
  ASSERT_EQ(m.size(), 100000u);
  for (uint64_t k = 1; k <= 100000; ++k) {
    const uint64_t* v = m.find(k * 0x9e3779b97f4a7c15ULL);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(*v, k);
  }
}

// Tables start on a cache line; one of 64 KiB or more on a page (a mapping
// of its own), of 2 MiB or more on a 2 MiB boundary (where huge pages can
// back it), and it is given back with the alignment it was made with (ASan
// checks the pairing).
TEST(LineAllocator, LineOrHugePageAligned) {
  LineAllocator<uint64_t> a;
  for (const size_t n : {size_t{1}, size_t{1000}, (size_t{64} << 10) / 8 - 1, (size_t{64} << 10) / 8, size_t{100000},
                         (size_t{2} << 20) / 8 - 1, (size_t{2} << 20) / 8, size_t{3} << 20}) {
    uint64_t* p = a.allocate(n);
    const bool huge = n * 8 >= (size_t{2} << 20), page = n * 8 >= (size_t{64} << 10);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (huge ? size_t{2} << 20 : page ? 4096 : 64), 0u) << n;
    p[0] = 1;
    p[n - 1] = 2;
    a.deallocate(p, n);
  }
}

}  // namespace
}  // namespace heaplab
