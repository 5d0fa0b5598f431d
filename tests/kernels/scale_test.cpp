#include "lockstep/kernels/scale.h"

#include <gtest/gtest.h>

#include <vector>

#include "lockstep/util/error.h"

using namespace lockstep;

TEST(ScaleInPlace, MultipliesInPlaceInEveryFloatingDType) {
  const std::vector<double> v{1.0, -2.5, 3.0e-3, 0.0, 7.0};
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor x = Tensor::fromVector(v, {5}).to(t);
    const std::vector<double> base = x.toVector<double>();
    kernels::scaleInPlace(x, 0.25);
    ASSERT_EQ(x.dtype(), t);
    const std::vector<double> got = x.toVector<double>();
    for (size_t i = 0; i < v.size(); ++i) {
      // A power of two scales exactly in every dtype.
      EXPECT_EQ(got[i], base[i] * 0.25) << dtypeName(t) << " at " << i;
    }
  }
  Tensor f = Tensor::fromVector<float>({0.1f, 3.0f}, {2});
  kernels::scaleInPlace(f, 1.0 / 3.0);
  EXPECT_EQ(f.toVector<float>(), (std::vector<float>{0.1f * static_cast<float>(1.0 / 3.0), 1.0f}));
}

TEST(ScaleInPlace, RejectsViewsWithGapsAndIntegers) {
  Tensor x = Tensor::zeros({4, 4}, DType::f32);
  Tensor col = x.narrow(1, 0, 2);
  EXPECT_THROW(kernels::scaleInPlace(col, 2.0), ValueError);
  Tensor i = Tensor::zeros({3}, DType::i64);
  EXPECT_THROW(kernels::scaleInPlace(i, 2.0), ValueError);
}

// By a 0-d tensor: the double overload's arithmetic (the factor cast to f32 for f32 and 16-bit x),
// whatever the factor's dtype; a factor of more than one element, an integer one or one inside the
// tensor it scales is refused (a GPU one on another device too: GpuScale).
TEST(ScaleInPlace, ByATensorFactorAsByItsValue) {
  const std::vector<double> v{1.0, -2.5, 3.0e-3, 0.0, 7.0, 0.1};
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (DType ft : {DType::f32, DType::f64}) {
      Tensor x = Tensor::fromVector(v, {6}).to(t), want = x.clone();
      const Tensor factor = Tensor::scalar(1.0 / 3.0, ft);
      kernels::scaleInPlace(want, factor.itemDouble());
      kernels::scaleInPlace(x, factor);
      EXPECT_EQ(x.toVector<double>(), want.toVector<double>()) << dtypeName(t) << " by " << dtypeName(ft);
    }
  }
  Tensor x = Tensor::zeros({3}, DType::f32);
  EXPECT_THROW(kernels::scaleInPlace(x, Tensor::zeros({2}, DType::f32)), ValueError);
  EXPECT_THROW(kernels::scaleInPlace(x, Tensor::scalar(2.0, DType::i64)), ValueError);
  // The f32 arithmetic by hand: 1/3 rounded to f32 first.
  Tensor y = Tensor::fromVector<float>({3.0f, 0.1f}, {2});
  kernels::scaleInPlace(y, Tensor::scalar(1.0 / 3.0, DType::f64));
  EXPECT_EQ(y.toVector<float>(),
            (std::vector<float>{3.0f * static_cast<float>(1.0 / 3.0), 0.1f * static_cast<float>(1.0 / 3.0)}));
  EXPECT_THROW(kernels::scaleInPlace(x, x.narrow(0, 1, 1).squeeze(0)), ValueError);
}
