#include "lockstep/kernels/finite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lockstep/util/error.h"

using namespace lockstep;

namespace {

template <typename T>
void checkDType() {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  // 3 x 65,536 + 5: several of the chunks the threads take, and a tail.
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, 3 * (int64_t{1} << 16) + 5}) {
    for (int64_t at = 0; at < n; at += std::max<int64_t>(1, n / 5)) {
      for (T bad : {inf, -inf, nan}) {
        std::vector<T> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(i % 13) - T(6);
        Tensor clean = Tensor::fromVector(v, {n});
        EXPECT_FALSE(kernels::hasNonFinite(clean));
        v[at] = bad;
        Tensor x = Tensor::fromVector(v, {n});
        EXPECT_TRUE(kernels::hasNonFinite(x)) << "n=" << n << " at=" << at << " value=" << bad;
        EXPECT_TRUE(kernels::scaleAndCheckNonFinite(x, 0.5)) << "n=" << n << " at=" << at;
      }
    }
  }
}

}  // namespace

TEST(Finite, finds_inf_and_nan_anywhere_in_f32_and_f64) {
  checkDType<float>();
  checkDType<double>();
}

TEST(Finite, scale_multiplies_in_place_and_reports_overflow_of_the_result) {
  Tensor x = Tensor::fromVector<float>({1.0f, -2.0f, 3e38f}, {3});
  EXPECT_FALSE(kernels::scaleAndCheckNonFinite(x, 0.25));
  EXPECT_EQ(x.toVector<float>(), (std::vector<float>{0.25f, -0.5f, 0.75e38f}));
  EXPECT_TRUE(kernels::scaleAndCheckNonFinite(x, 8.0));  // 6e38 is past f32's range
  // Every chunk of a long tensor is scaled.
  const int64_t n = 3 * (int64_t{1} << 16) + 5;
  Tensor y = Tensor::full({n}, 3.0f);
  EXPECT_FALSE(kernels::scaleAndCheckNonFinite(y, 0.5));
  EXPECT_EQ(y.toVector<float>(), std::vector<float>(static_cast<size_t>(n), 1.5f));
}

TEST(Finite, strided_views_are_checked_and_scaled_where_they_point) {
  // The transpose of a 3x4 matrix: not dense in row order.
  std::vector<double> v(12);
  for (int i = 0; i < 12; ++i) v[i] = i;
  Tensor m = Tensor::fromVector(v, {3, 4});
  Tensor t = m.transpose(0, 1).slice(1, 4);  // a strided view of some elements
  EXPECT_FALSE(kernels::hasNonFinite(t));
  EXPECT_FALSE(kernels::scaleAndCheckNonFinite(t, 2.0));
  const auto after = m.toVector<double>();
  for (int i = 0; i < 12; ++i) {
    const bool in_view = i % 4 >= 1;  // columns 1..3 of m are rows 1..3 of the transpose
    EXPECT_EQ(after[i], in_view ? 2.0 * i : i) << i;
  }
  m.data<double>()[5] = std::numeric_limits<double>::infinity();  // row 1, column 1: in the view
  EXPECT_TRUE(kernels::hasNonFinite(t));
  m.data<double>()[5] = 0;
  m.data<double>()[4] = std::numeric_limits<double>::infinity();  // column 0: outside the view
  EXPECT_FALSE(kernels::hasNonFinite(t));
}

TEST(Finite, other_dtypes_are_not_supported_naming_the_dtype) {
  Tensor x = Tensor::empty({3}, DType::i64);
  try {
    kernels::hasNonFinite(x);
    FAIL() << "expected NotSupportedError";
  } catch (const NotSupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("i64"), std::string::npos) << e.what();
  }
}

TEST(Finite, bf16_and_f16_scale_in_f32_and_the_stored_value_decides) {
  // As the GPU's kernel: x.to(f32) * float(factor), rounded once; a result the rounding carries
  // past the 16-bit range (f16's 65504) counts as an overflow though its f32 value is finite.
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor x = Tensor::fromVector(std::vector<float>{1.0f, -3.0f, 0.3f, 1e-3f}, {4}).to(t);
    const std::vector<float> was = x.to(DType::f32).toVector<float>();
    EXPECT_FALSE(kernels::hasNonFinite(x));
    EXPECT_FALSE(kernels::scaleAndCheckNonFinite(x, 0.37));
    std::vector<float> want;
    for (float v : was) want.push_back(v * 0.37f);
    EXPECT_EQ(x.toVector<double>(), Tensor::fromVector(want, {4}).to(t).toVector<double>()) << dtypeName(t);
    Tensor bad = Tensor::fromVector(std::vector<float>{1.0f, std::nanf("")}, {2}).to(t);
    EXPECT_TRUE(kernels::hasNonFinite(bad)) << dtypeName(t);
  }
  Tensor big = Tensor::fromVector(std::vector<float>{60000.0f}, {1}).to(DType::f16);
  EXPECT_TRUE(kernels::scaleAndCheckNonFinite(big, 2.0));  // 120000 is finite in f32, inf in f16
  // A strided bf16 view: only its elements are scaled.
  Tensor m = Tensor::fromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).to(DType::bf16);
  Tensor col = m.narrow(1, 1, 1);
  EXPECT_FALSE(kernels::scaleAndCheckNonFinite(col, 2.0));
  EXPECT_EQ(m.toVector<double>(), (std::vector<double>{1, 4, 3, 4, 10, 6}));
}
