// Sequential/Random/Batch samplers: determinism, epochs, batching, checkpoint state.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "lockstep/data.h"

namespace lockstep::data {
namespace {

bool isPermutation(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  std::vector<int64_t> want(static_cast<size_t>(n));
  std::iota(want.begin(), want.end(), int64_t{0});
  return v == want;
}

TEST(Sampler, sequential_yields_zero_to_n) {
  SequentialSampler s(5);
  EXPECT_EQ(s.epochIndices(0), std::vector<int64_t>({0, 1, 2, 3, 4}));
  EXPECT_EQ(s.epochIndices(7), s.epochIndices(0));
  EXPECT_TRUE(SequentialSampler(0).epochIndices(0).empty());
}

TEST(Sampler, random_is_a_deterministic_permutation_per_epoch) {
  RandomSampler a(1000, 42), b(1000, 42), c(1000, 43);
  const auto e0 = a.epochIndices(0);
  EXPECT_TRUE(isPermutation(e0, 1000));
  EXPECT_EQ(e0, b.epochIndices(0));                 // same seed, same order
  EXPECT_NE(e0, a.epochIndices(1));                 // a new epoch reshuffles
  EXPECT_NE(e0, c.epochIndices(0));                 // another seed differs
  EXPECT_EQ(a.epochIndices(1), c.epochIndices(0));  // seeded with seed + epoch, as torch
  EXPECT_NE(e0, SequentialSampler(1000).epochIndices(0));
  EXPECT_EQ(randomPermutation(5, 0), randomPermutation(5, 0));
  EXPECT_TRUE(isPermutation(randomPermutation(1, 9), 1));
  EXPECT_TRUE(randomPermutation(0, 9).empty());
}

TEST(Sampler, random_permutation_is_roughly_uniform) {
  // Position of element 0 over many seeds: each of 4 slots about 1/4 of the time.
  std::vector<int> hits(4, 0);
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    auto p = randomPermutation(4, seed);
    ++hits[std::find(p.begin(), p.end(), 0) - p.begin()];
  }
  for (int h : hits) EXPECT_NEAR(h, 1000, 120);
}

TEST(Sampler, state_advance_and_restore) {
  RandomSampler s(10, 1);
  s.setEpoch(3);
  s.advance(4);
  EXPECT_EQ(s.state(), (SamplerState{3, 4}));
  const auto rest = s.remainingIndices();
  const auto e3 = s.epochIndices(3);
  EXPECT_EQ(rest, std::vector<int64_t>(e3.begin() + 4, e3.end()));
  RandomSampler t(10, 1);
  t.loadState(SamplerState::fromJson(s.state().toJson()));
  EXPECT_EQ(t.remainingIndices(), rest);
  EXPECT_THROW(s.advance(7), ValueError);
  EXPECT_THROW(t.loadState({0, 11}), ValueError);
  EXPECT_THROW(SamplerState::fromJson(nlohmann::json{{"epoch", 1}}), ValueError);
  s.setEpoch(4);
  EXPECT_EQ(s.position(), 0);
}

TEST(Sampler, batch_sampler_with_and_without_drop_last) {
  auto seq = std::make_shared<SequentialSampler>(10);
  BatchSampler keep(seq, {.batch_size = 4, .drop_last = false});
  EXPECT_EQ(keep.size(), 3);
  auto batches = keep.epochBatches(0);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], std::vector<int64_t>({0, 1, 2, 3}));
  EXPECT_EQ(batches[2], std::vector<int64_t>({8, 9}));
  BatchSampler drop(seq, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(drop.size(), 2);
  EXPECT_EQ(drop.epochBatches(0).back(), std::vector<int64_t>({4, 5, 6, 7}));
  BatchSampler exact(seq, {.batch_size = 5, .drop_last = true});
  EXPECT_EQ(exact.size(), 2);
  EXPECT_THROW(BatchSampler(seq, {.batch_size = 0}), ValueError);
}

TEST(Sampler, batch_sampler_state_keeps_the_index_sampler_in_step) {
  auto rnd = std::make_shared<RandomSampler>(10, 5);
  BatchSampler bs(rnd, {.batch_size = 4});
  bs.setEpoch(2);
  bs.advance(2);
  EXPECT_EQ(bs.state(), (SamplerState{2, 2}));
  EXPECT_EQ(rnd->state(), (SamplerState{2, 8}));
  bs.advance(1);
  EXPECT_EQ(rnd->position(), 10);  // the short last batch
  EXPECT_THROW(bs.advance(1), ValueError);
  bs.loadState({5, 1});
  EXPECT_EQ(rnd->state(), (SamplerState{5, 4}));
  EXPECT_THROW(bs.loadState({5, 4}), ValueError);
}

}  // namespace
}  // namespace lockstep::data
