// ZeRO's flat partition: balanced for any world size, every element owned exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "lockstep/parallel/zero/partition.h"
#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::parallel;

TEST(ZeroPartition, balanced_split_gives_longer_pieces_from_first_long) {
  EXPECT_EQ(balancedSplit(10, 4), (std::vector<int64_t>{0, 3, 6, 8, 10}));
  EXPECT_EQ(balancedSplit(10, 4, 2), (std::vector<int64_t>{0, 2, 4, 7, 10}));
  EXPECT_EQ(balancedSplit(10, 4, 3), (std::vector<int64_t>{0, 3, 5, 7, 10}));
  EXPECT_EQ(balancedSplit(2, 3), (std::vector<int64_t>{0, 1, 2, 2}));
  EXPECT_EQ(balancedSplit(0, 3), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(balancedSplit(7, 1), (std::vector<int64_t>{0, 7}));
}

TEST(ZeroPartition, balanced_split_rejects_bad_arguments) {
  EXPECT_THROW(balancedSplit(-1, 2), ValueError);
  EXPECT_THROW(balancedSplit(4, 0), ValueError);
  EXPECT_THROW(balancedSplit(4, 2, 2), ValueError);
}

TEST(ZeroPartition, ranks_totals_differ_by_at_most_one_over_many_buckets) {
  // Ten buckets of 7 elements over 3 and 4 ranks: per bucket the remainder lands on different
  // ranks, so no rank collects every bucket's extra element.
  std::vector<int64_t> numels(10, 7);
  std::vector<std::vector<size_t>> buckets;
  for (size_t i = 0; i < 10; ++i) buckets.push_back({i});
  for (int world : {1, 2, 3, 4, 7, 11}) {
    ZeroLayout l = makeZeroLayout(numels, buckets, world);
    auto [lo, hi] = std::minmax_element(l.rank_numel.begin(), l.rank_numel.end());
    EXPECT_LE(*hi - *lo, 1) << "world " << world;
    EXPECT_EQ(std::accumulate(l.rank_numel.begin(), l.rank_numel.end(), int64_t{0}), 70);
    for (const ZeroBucket& b : l.buckets) EXPECT_EQ(b.chunk, (b.numel + world - 1) / world);
  }
}

TEST(ZeroPartition, segments_cover_every_element_exactly_once) {
  // Parameters of 5, 1, 13 and 3 elements in two buckets, over 3 ranks (22 is not divisible by 3 or 4).
  std::vector<int64_t> numels{5, 1, 13, 3};
  ZeroLayout l = makeZeroLayout(numels, {{3, 2}, {1, 0}}, 3);
  std::vector<std::vector<int>> owners(numels.size());
  for (size_t p = 0; p < numels.size(); ++p) owners[p].assign(numels[p], 0);
  for (const ZeroBucket& b : l.buckets) {
    int64_t covered = 0;
    for (int r = 0; r < 3; ++r) {
      for (const ZeroSegment& s : segmentsIn(b, b.piece[r], b.piece[r + 1])) {
        for (int64_t i = 0; i < s.numel; ++i) ++owners[s.param][s.param_offset + i];
        covered += s.numel;
      }
    }
    EXPECT_EQ(covered, b.numel);
  }
  for (const auto& o : owners)
    for (int c : o) EXPECT_EQ(c, 1);
  // Bucket 0 holds parameter 3 then parameter 2: 16 elements, pieces 6, 5, 5.
  EXPECT_EQ(l.buckets[0].piece, (std::vector<int64_t>{0, 6, 11, 16}));
  auto seg = segmentsIn(l.buckets[0], 0, 6);
  ASSERT_EQ(seg.size(), 2u);
  EXPECT_EQ(seg[0].param, 3u);
  EXPECT_EQ(seg[0].numel, 3);
  EXPECT_EQ(seg[1].param, 2u);
  EXPECT_EQ(seg[1].param_offset, 0);
  EXPECT_EQ(seg[1].bucket_offset, 3);
  EXPECT_EQ(seg[1].numel, 3);
}

TEST(ZeroPartition, layout_rejects_missing_or_repeated_parameters) {
  EXPECT_THROW(makeZeroLayout({1, 2}, {{0}}, 2), ValueError);
  EXPECT_THROW(makeZeroLayout({1, 2}, {{0, 1}, {1}}, 2), ValueError);
  EXPECT_THROW(makeZeroLayout({1, 2}, {{0, 1}}, 0), ValueError);
}
