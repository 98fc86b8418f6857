// The KV pool's bookkeeping (engine/kv_pool.h): blocks given out as sequences grow and returned
// when they shrink or end, a full pool refusing without taking anything, ring groups that stop
// growing at their ring, and many sequences of mixed lengths coming and going in random order
// leaving the pool whole, with no block ever held twice.
#include "engine/kv_pool.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"

namespace ps {
namespace {

TEST(KvPool, BlocksAreGivenAsSequencesGrowAndReturned) {
  KvPool pool({{1000, 10}}, 16, 3);
  EXPECT_EQ(pool.total_cells(), 160);
  EXPECT_TRUE(pool.reserve(0, 1));
  EXPECT_EQ(pool.table(0, 0), std::vector<int32_t>({0}));
  EXPECT_TRUE(pool.reserve(0, 16));  // still the one block
  EXPECT_EQ(pool.table(0, 0).size(), 1u);
  EXPECT_TRUE(pool.reserve(1, 40));  // three blocks
  EXPECT_EQ(pool.table(1, 0), std::vector<int32_t>({1, 2, 3}));
  EXPECT_TRUE(pool.reserve(0, 17));
  EXPECT_EQ(pool.table(0, 0), std::vector<int32_t>({0, 4}));
  EXPECT_EQ(pool.used_cells(), 5 * 16);
  EXPECT_EQ(pool.cells_of(1), 3 * 16);
  pool.shrink(1, 20);  // keeps two blocks
  EXPECT_EQ(pool.table(1, 0), std::vector<int32_t>({1, 2}));
  pool.release(0);
  EXPECT_TRUE(pool.table(0, 0).empty());
  EXPECT_EQ(pool.free_blocks(0), 8);
  EXPECT_TRUE(pool.reserve(2, 1));  // the lowest free block
  EXPECT_EQ(pool.table(2, 0), std::vector<int32_t>({0}));
}

TEST(KvPool, AFullPoolRefusesAndTakesNothing) {
  // Two groups: every position, and a ring of 20 slots.
  KvPool pool({{1000, 4}, {20, 3}}, 8, 2);
  EXPECT_EQ(pool.total_cells(), 32);  // cells as positions count them: the first group's
  ASSERT_TRUE(pool.reserve(0, 24));   // 3 blocks of the first group, 3 of the ring
  EXPECT_EQ(pool.used_cells(), 24);
  EXPECT_EQ(pool.free_blocks(0), 1);
  EXPECT_EQ(pool.free_blocks(1), 0);
  EXPECT_EQ(pool.missing(1, 8, 1), 1);
  EXPECT_FALSE(pool.reserve(1, 8));  // the ring group has none left
  EXPECT_TRUE(pool.table(1, 0).empty());
  EXPECT_EQ(pool.free_blocks(0), 1);  // nothing taken from the other group either
  // A ring stops growing at its slots: sequence 0 past 20 positions takes no more of it.
  EXPECT_TRUE(pool.reserve(0, 32));
  EXPECT_EQ(pool.table(0, 1).size(), 3u);
  EXPECT_EQ(pool.table(0, 0).size(), 4u);
  EXPECT_FALSE(pool.reserve(0, 33));  // the first group is out of blocks
  pool.release(0);
  EXPECT_TRUE(pool.reserve(1, 8));
  EXPECT_THROW(KvPool({{10, 0}}, 8, 1), UsageError);
  EXPECT_THROW(KvPool({{10, 2}}, 0, 1), UsageError);
  EXPECT_THROW(KvPool({}, 8, 1), UsageError);
}

TEST(KvPool, ManySequencesOfMixedLengthsLeaveThePoolWhole) {
  KvPool pool({{4096, 64}, {300, 40}}, 16, 12);
  std::mt19937 rng(11);
  std::vector<int64_t> len(12, 0);
  int refused = 0;
  for (int step = 0; step < 20000; ++step) {
    const int seq = int(rng() % 12);
    switch (rng() % 4) {
      case 0:
      case 1: {  // grow
        const int64_t want = len[size_t(seq)] + int64_t(rng() % 90) + 1;
        if (pool.reserve(seq, want))
          len[size_t(seq)] = want;
        else
          ++refused;
        break;
      }
      case 2:  // shrink (a rewind)
        len[size_t(seq)] = int64_t(rng() % size_t(len[size_t(seq)] + 1));
        pool.shrink(seq, len[size_t(seq)]);
        break;
      default:  // end
        len[size_t(seq)] = 0;
        pool.release(seq);
    }
    // Every block is held by at most one sequence, and held + free is the whole group.
    for (int g = 0; g < pool.n_groups(); ++g) {
      std::set<int32_t> held;
      for (int s = 0; s < 12; ++s) {
        ASSERT_EQ(int64_t(pool.table(s, g).size()), pool.blocks_for(g, len[size_t(s)]));
        for (int32_t b : pool.table(s, g)) ASSERT_TRUE(held.insert(b).second) << "block " << b;
      }
      ASSERT_EQ(int64_t(held.size()) + pool.free_blocks(g), pool.group(g).n_blocks);
    }
  }
  EXPECT_GT(refused, 0);  // the pool did run full
  for (int s = 0; s < 12; ++s) pool.release(s);
  EXPECT_EQ(pool.used_cells(), 0);
  for (int g = 0; g < pool.n_groups(); ++g) EXPECT_EQ(pool.free_blocks(g), pool.group(g).n_blocks);
}

}  // namespace
}  // namespace ps
