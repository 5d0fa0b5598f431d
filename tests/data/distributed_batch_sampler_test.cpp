#include "lockstep/data/samplers/distributed_batch_sampler.h"

#include <gtest/gtest.h>

#include <set>

#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::data;

TEST(DistributedBatchSampler, paddle_block_interleaving) {
  // n = 10, R = 2, b = 2: total 10, last = 10 % 4 = 2, last_local = 1.
  // rank 0: [0,1] [4,5] + tail [8];  rank 1: [2,3] [6,7] + tail [9]   (Paddle's order)
  DistributedBatchSamplerOptions o;
  o.batch_size = 2;
  o.num_replicas = 2;
  o.rank = 0;
  EXPECT_EQ(DistributedBatchSampler(10, o).epochIndices(0), (std::vector<int64_t>{0, 1, 4, 5, 8}));
  o.rank = 1;
  EXPECT_EQ(DistributedBatchSampler(10, o).epochIndices(0), (std::vector<int64_t>{2, 3, 6, 7, 9}));
}

TEST(DistributedBatchSampler, pads_before_splitting) {
  // n = 7, R = 3: per rank ceil(7/3) = 3, total 9 = 0..6 + [0, 1].
  DistributedBatchSamplerOptions o;
  o.batch_size = 1;
  o.num_replicas = 3;
  std::vector<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    o.rank = r;
    auto idx = DistributedBatchSampler(7, o).epochIndices(0);
    EXPECT_EQ(idx.size(), 3u);
    all.insert(all.end(), idx.begin(), idx.end());
  }
  std::multiset<int64_t> got(all.begin(), all.end());
  EXPECT_EQ(got, (std::multiset<int64_t>{0, 0, 1, 1, 2, 3, 4, 5, 6}));
}

TEST(DistributedBatchSampler, shuffle_is_per_epoch_and_covers_everything) {
  DistributedBatchSamplerOptions o;
  o.batch_size = 4;
  o.num_replicas = 2;
  o.shuffle = true;
  o.seed = 3;
  std::set<int64_t> seen;
  for (int r = 0; r < 2; ++r) {
    o.rank = r;
    DistributedBatchSampler s(32, o);
    auto e0 = s.epochIndices(0), e1 = s.epochIndices(1);
    EXPECT_NE(e0, e1);
    EXPECT_EQ(e0, s.epochIndices(0));
    seen.insert(e0.begin(), e0.end());
  }
  EXPECT_EQ(seen.size(), 32u);
}

TEST(DistributedBatchSampler, rejects_bad_options) {
  DistributedBatchSamplerOptions o;
  o.num_replicas = 2;
  o.rank = 2;
  EXPECT_THROW(DistributedBatchSampler(10, o), ValueError);
  o.rank = 0;
  o.batch_size = 0;
  EXPECT_THROW(DistributedBatchSampler(10, o), ValueError);
}
