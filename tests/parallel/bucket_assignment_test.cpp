#include "lockstep/parallel/ddp/bucket_assignment.h"

#include <gtest/gtest.h>

#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::parallel;

TEST(BucketAssignment, reverse_order_with_small_first_bucket) {
  // Five 400 KiB f32 parameters: the first bucket closes at >= 1 MiB (3 params), the rest stay
  // together under the 25 MiB cap.
  std::vector<size_t> bytes(5, 400u << 10);
  std::vector<DType> dt(5, DType::f32);
  auto b = assignBuckets(bytes, dt);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0], (std::vector<size_t>{4, 3, 2}));
  EXPECT_EQ(b[1], (std::vector<size_t>{1, 0}));
}

TEST(BucketAssignment, caps_bound_every_bucket) {
  std::vector<size_t> bytes = {100, 100, 100, 100, 100, 100, 100};
  std::vector<DType> dt(7, DType::f32);
  BucketAssignmentOptions o;
  o.first_bucket_bytes = 100;
  o.bucket_bytes = 250;
  auto b = assignBuckets(bytes, dt, o);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{6}));
  EXPECT_EQ(b[1], (std::vector<size_t>{5, 4, 3}));
  EXPECT_EQ(b[2], (std::vector<size_t>{2, 1, 0}));
}

TEST(BucketAssignment, one_dtype_per_bucket) {
  std::vector<size_t> bytes = {8, 8, 8, 8};
  std::vector<DType> dt = {DType::f32, DType::f64, DType::f32, DType::f64};
  auto b = assignBuckets(bytes, dt);
  ASSERT_EQ(b.size(), 2u);
  // Both open buckets are left at the end; the one whose first gradient comes first goes first.
  EXPECT_EQ(b[0], (std::vector<size_t>{3, 1}));
  EXPECT_EQ(b[1], (std::vector<size_t>{2, 0}));
}

TEST(BucketAssignment, empty_and_single) {
  EXPECT_TRUE(assignBuckets({}, {}).empty());
  auto b = assignBuckets({4}, {DType::f32});
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], (std::vector<size_t>{0}));
  EXPECT_THROW(assignBuckets({4}, {}), ValueError);
}
