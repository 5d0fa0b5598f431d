// The element-wise reduction kernels every backend shares: the divisor that finishes an avg in the
// combining pass gives what a separate divideBy pass gives.
#include "lockstep/comm/reduce_op.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

template <typename T>
std::vector<T> values(size_t n, double scale, double shift) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = T(static_cast<float>((static_cast<double>(i % 97) - 40.0) * scale + shift));
  return v;
}

template <typename T>
void expectFusedEqualsSeparate(DType dt, int64_t divisor) {
  const size_t n = 1000;  // not a multiple of a vector's width: the tail is covered too
  std::vector<T> a = values<T>(n, 0.37, 1.0), b = values<T>(n, -0.11, 3.0);
  std::vector<T> separate(n), fused(n), copy(n);
  reduceInto(separate.data(), a.data(), b.data(), n, dt, ReduceOp::avg);
  divideBy(separate.data(), n, dt, divisor);
  reduceInto(fused.data(), a.data(), b.data(), n, dt, ReduceOp::avg, copy.data(), divisor);
  EXPECT_EQ(std::memcmp(separate.data(), fused.data(), n * sizeof(T)), 0)
      << dtypeName(dt) << " / " << divisor;
  EXPECT_EQ(std::memcmp(fused.data(), copy.data(), n * sizeof(T)), 0) << dtypeName(dt) << " / " << divisor;
}

TEST(ReduceOp, fused_divisor_equals_dividing_afterwards) {
  for (int64_t d : {2, 3, 4, 7, 8}) {
    expectFusedEqualsSeparate<float>(DType::f32, d);
    expectFusedEqualsSeparate<double>(DType::f64, d);
    expectFusedEqualsSeparate<int32_t>(DType::i32, d);
    expectFusedEqualsSeparate<int64_t>(DType::i64, d);
  }
}

TEST(ReduceOp, fused_divisor_rounds_half_types_once) {
  // f16/bf16 combine in float: the fused pass rounds (a + b) / d once, which is the float value
  // rounded, while dividing afterwards rounds the sum first.
  const size_t n = 500;
  std::vector<BFloat16> a = values<BFloat16>(n, 0.37, 1.0), b = values<BFloat16>(n, -0.11, 3.0), out(n);
  reduceInto(out.data(), a.data(), b.data(), n, DType::bf16, ReduceOp::avg, nullptr, 3);
  for (size_t i = 0; i < n; ++i) {
    float want = (static_cast<float>(a[i]) + static_cast<float>(b[i])) / 3.0f;
    EXPECT_EQ(static_cast<float>(out[i]), static_cast<float>(BFloat16(want))) << i;
  }
}

TEST(ReduceOp, power_of_two_divisor_is_exact) {
  std::vector<float> a = {1.0f, 3.0f, -5.0f, 1e-30f}, b = {2.0f, 0.5f, 5.0f, 3e-30f}, out(4);
  reduceInto(out.data(), a.data(), b.data(), 4, DType::f32, ReduceOp::sum, nullptr, 4);
  EXPECT_EQ(out, (std::vector<float>{0.75f, 0.875f, 0.0f, 1e-30f}));
}

TEST(ReduceOp, divisor_with_other_ops_is_an_error) {
  float a = 1, b = 2, out = 0;
  EXPECT_THROW(reduceInto(&out, &a, &b, 1, DType::f32, ReduceOp::max, nullptr, 2), InternalError);
  EXPECT_THROW(reduceInto(&out, &a, &b, 1, DType::f32, ReduceOp::sum, nullptr, 0), InternalError);
}

}  // namespace
}  // namespace lockstep::comm
