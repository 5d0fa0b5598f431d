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
