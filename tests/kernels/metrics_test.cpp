// countCorrectInto on the host: the prediction is the first column of a row's largest value in
// f32, NaNs skipped unless in column 0, and the count adds up over calls.
#include "lockstep/kernels/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/tensor.h"

using namespace lockstep;

namespace {
int64_t correctOf(const Tensor& logits, const std::vector<int64_t>& target) {
  Tensor c = Tensor::scalar(0, DType::i64);
  kernels::countCorrectInto(logits, Tensor::fromVector(target, {static_cast<int64_t>(target.size())}), c);
  return c.item<int64_t>();
}
}  // namespace

TEST(CountCorrect, first_largest_value_predicts_and_nan_is_skipped) {
  const float nan = NAN;
  Tensor l = Tensor::fromVector(std::vector<float>{0, 2, 2, 1,            // tie: column 1
                                                   nan, 5, 1, 0,          // NaN in column 0: column 0
                                                   1, nan, 3, 3,          // NaN skipped: column 2
                                                   -INFINITY, -1, 0, 0},  // column 2
                                {4, 4});
  EXPECT_EQ(correctOf(l, {1, 0, 2, 2}), 4);
  EXPECT_EQ(correctOf(l, {2, 1, 3, 3}), 0);
  // Compared in f32: two f64 values that round to one f32 are a tie, and the first wins.
  Tensor d = Tensor::fromVector(std::vector<double>{1.0, 1.0 + 1e-12}, {1, 2});
  EXPECT_EQ(correctOf(d, {0}), 1);
  // A column-major view counts as its contiguous copy; the counter accumulates.
  Tensor c = Tensor::scalar(5, DType::i64);
  Tensor t = Tensor::fromVector(std::vector<int64_t>{1, 0, 2, 2}, {4});
  kernels::countCorrectInto(l.transpose(0, 1).contiguous().transpose(0, 1), t, c);
  EXPECT_EQ(c.item<int64_t>(), 9);
  EXPECT_EQ(correctOf(Tensor::empty({0, 3}), {}), 0);
}

TEST(CountCorrect, bad_operands_are_value_errors) {
  Tensor c = Tensor::scalar(0, DType::i64);
  Tensor l = Tensor::zeros({2, 3});
  EXPECT_THROW(kernels::countCorrectInto(l, Tensor::zeros({3}, DType::i64), c), ValueError);
  EXPECT_THROW(kernels::countCorrectInto(l, Tensor::zeros({2}, DType::f32), c), ValueError);
  EXPECT_THROW(kernels::countCorrectInto(l.reshape({6}), Tensor::zeros({6}, DType::i64), c), ValueError);
  Tensor wrong = Tensor::scalar(0, DType::f64);
  EXPECT_THROW(kernels::countCorrectInto(l, Tensor::zeros({2}, DType::i64), wrong), ValueError);
}
