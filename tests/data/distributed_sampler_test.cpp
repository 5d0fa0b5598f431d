// DistributedSampler index math against hand-computed expectations (torch's semantics): pad by
// repeating the head, or drop the tail; rank r takes order[r::R].
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "lockstep/data.h"

namespace lockstep::data {
namespace {

using Idx = std::vector<int64_t>;

Idx shard(int64_t n, int64_t world, int64_t rank, bool drop_last, bool shuffle = false, uint64_t seed = 0,
          uint64_t epoch = 0) {
  DistributedSampler s(
      n, {.num_replicas = world, .rank = rank, .shuffle = shuffle, .seed = seed, .drop_last = drop_last});
  return s.epochIndices(epoch);
}

TEST(DistributedSampler, world_one_is_the_whole_dataset) {
  EXPECT_EQ(shard(5, 1, 0, false), Idx({0, 1, 2, 3, 4}));
  EXPECT_EQ(shard(5, 1, 0, true), Idx({0, 1, 2, 3, 4}));
}

TEST(DistributedSampler, world_two_interleaves) {
  EXPECT_EQ(shard(10, 2, 0, false), Idx({0, 2, 4, 6, 8}));
  EXPECT_EQ(shard(10, 2, 1, false), Idx({1, 3, 5, 7, 9}));
  // 11 samples: padded to 12 with index 0.
  EXPECT_EQ(shard(11, 2, 0, false), Idx({0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(shard(11, 2, 1, false), Idx({1, 3, 5, 7, 9, 0}));
  EXPECT_EQ(shard(11, 2, 1, true), Idx({1, 3, 5, 7, 9}));
}

TEST(DistributedSampler, world_three_pads_or_drops) {
  // 10 -> total 12 = order + [0, 1].
  EXPECT_EQ(shard(10, 3, 0, false), Idx({0, 3, 6, 9}));
  EXPECT_EQ(shard(10, 3, 1, false), Idx({1, 4, 7, 0}));
  EXPECT_EQ(shard(10, 3, 2, false), Idx({2, 5, 8, 1}));
  // drop_last: total 9.
  EXPECT_EQ(shard(10, 3, 0, true), Idx({0, 3, 6}));
  EXPECT_EQ(shard(10, 3, 1, true), Idx({1, 4, 7}));
  EXPECT_EQ(shard(10, 3, 2, true), Idx({2, 5, 8}));
}

TEST(DistributedSampler, world_four) {
  EXPECT_EQ(shard(10, 4, 0, false), Idx({0, 4, 8}));
  EXPECT_EQ(shard(10, 4, 1, false), Idx({1, 5, 9}));
  EXPECT_EQ(shard(10, 4, 2, false), Idx({2, 6, 0}));
  EXPECT_EQ(shard(10, 4, 3, false), Idx({3, 7, 1}));
  EXPECT_EQ(shard(10, 4, 2, true), Idx({2, 6}));
  EXPECT_EQ(shard(10, 4, 3, true), Idx({3, 7}));
}

TEST(DistributedSampler, fewer_samples_than_ranks) {
  // Padding longer than the data repeats it: 2 samples on 4 ranks -> [0, 1, 0, 1].
  EXPECT_EQ(shard(2, 4, 2, false), Idx({0}));
  EXPECT_EQ(shard(2, 4, 3, false), Idx({1}));
  // 1 sample on 3 ranks -> [0, 0, 0].
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(shard(1, 3, r, false), Idx({0}));
  EXPECT_TRUE(shard(2, 4, 0, true).empty());
  EXPECT_TRUE(shard(0, 3, 1, false).empty());
}

TEST(DistributedSampler, sizes_and_equal_counts) {
  for (int64_t world : {1, 2, 3, 4, 7}) {
    for (int64_t n : {0, 1, 5, 12, 13, 60}) {
      for (bool drop : {false, true}) {
        const int64_t want = drop ? n / world : (n + world - 1) / world;
        for (int64_t r = 0; r < world; ++r) {
          DistributedSampler s(n, {.num_replicas = world, .rank = r, .drop_last = drop});
          EXPECT_EQ(s.size(), want);
          EXPECT_EQ(static_cast<int64_t>(s.epochIndices(0).size()), want) << n << " " << world << " " << r;
        }
      }
    }
  }
}

TEST(DistributedSampler, shuffled_shards_cover_the_dataset_and_follow_the_permutation) {
  const int64_t n = 23;
  for (int64_t world : {1, 2, 3, 4}) {
    for (bool drop : {false, true}) {
      std::multiset<int64_t> all;
      for (int64_t r = 0; r < world; ++r) {
        Idx mine = shard(n, world, r, drop, true, 7, 3);
        // Rank r's share is the epoch permutation (seed + epoch), padded/cut, at r, r+R, ...
        Idx order = randomPermutation(n, 7 + 3);
        const int64_t total = static_cast<int64_t>(mine.size()) * world;
        for (int64_t i = n; i < total; ++i) order.push_back(order[i - n]);
        for (size_t k = 0; k < mine.size(); ++k) EXPECT_EQ(mine[k], order[r + k * world]);
        all.insert(mine.begin(), mine.end());
      }
      std::set<int64_t> distinct(all.begin(), all.end());
      if (drop) {
        EXPECT_EQ(static_cast<int64_t>(all.size()), n / world * world);
        EXPECT_EQ(distinct.size(), all.size());  // disjoint
      } else {
        EXPECT_EQ(static_cast<int64_t>(distinct.size()), n);  // union covers the dataset
        EXPECT_EQ(static_cast<int64_t>(all.size()), (n + world - 1) / world * world);
      }
    }
  }
}

TEST(DistributedSampler, epoch_and_seed_change_the_order_the_same_way_on_every_rank) {
  EXPECT_NE(shard(50, 2, 0, false, true, 0, 0), shard(50, 2, 0, false, true, 0, 1));
  EXPECT_EQ(shard(50, 2, 0, false, true, 0, 1), shard(50, 2, 0, false, true, 1, 0));  // seed + epoch
  EXPECT_EQ(shard(50, 2, 0, false, true, 5, 2), shard(50, 2, 0, false, true, 5, 2));
  // Via set_epoch and the sampler's own state.
  DistributedSampler s(50, {.num_replicas = 2, .rank = 1, .seed = 9});
  s.setEpoch(4);
  EXPECT_EQ(s.remainingIndices(), shard(50, 2, 1, false, true, 9, 4));
}

TEST(DistributedSampler, rejects_bad_options) {
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 0}), ValueError);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), ValueError);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = -1}), ValueError);
}

}  // namespace
}  // namespace lockstep::data
