// The bulk f32 <-> bf16 / f16 conversions (the casts of mixed precision) against the scalar ones.
#include "lockstep/tensor/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "lockstep/util/dtype.h"

using namespace lockstep;

TEST(DTypeConversion, bulk_conversions_match_the_scalar_ones) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          65504.0f,
                          65520.0f,
                          1e-8f,
                          6e-8f,
                          3e-5f,
                          1e30f,
                          -1e-40f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::max()};
  uint32_t state = 12345;
  // Random bit patterns (every exponent, both signs), enough of them that the conversions split
  // into runs across the threads, with a tail.
  for (int i = 0; i < 1200003; ++i) {
    state = state * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &state, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<uint16_t> b(n), h(n);
  std::vector<float> bb(n), hh(n);
  convertF32ToBF16(v.data(), b.data(), n);
  convertF32ToF16(v.data(), h.data(), n);
  convertBF16ToF32(b.data(), bb.data(), n);
  convertF16ToF32(h.data(), hh.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[i], BFloat16(v[i]).bits) << v[i];
    ASSERT_EQ(h[i], Half(v[i]).bits) << v[i];
    BFloat16 sb;
    sb.bits = b[i];
    Half sh;
    sh.bits = h[i];
    ASSERT_EQ(bb[i], static_cast<float>(sb)) << v[i];
    ASSERT_EQ(hh[i], static_cast<float>(sh)) << v[i];
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint16_t nb, nh;
  float back;
  convertF32ToBF16(&nan, &nb, 1);
  convertF32ToF16(&nan, &nh, 1);
  convertBF16ToF32(&nb, &back, 1);
  EXPECT_TRUE(std::isnan(back));
  convertF16ToF32(&nh, &back, 1);
  EXPECT_TRUE(std::isnan(back));
}
