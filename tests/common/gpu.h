#pragma once
// For tests/*/gpu_*_test.cpp (CTest label gpu): skip, saying why, where no GPU can run them, and
// compare a GPU result with the CPU reference.
#include <gtest/gtest.h>

#include "lockstep/tensor/tensor.h"

namespace lockstep::testing {

/// Skips the calling test (GTEST_SKIP) unless cuda:0 is usable.
#define LOCKSTEP_REQUIRE_GPU()                                                                      \
  do {                                                                                              \
    if (::lockstep::cudaDeviceCount() == 0) {                                                       \
      GTEST_SKIP() << "no GPU here ("                                                               \
                   << (::lockstep::builtWithCuda() ? "no CUDA device found" : "built without CUDA") \
                   << "): GPU tests run with ctest -L gpu on a machine with one";                   \
    }                                                                                               \
  } while (0)

/// Largest |a - b| / (atol + rtol * |b|) over the elements (a, b brought to the host in f64);
/// <= 1 means close. Equal elements are close, equal infinities included (an f16 sum past 65504 is
/// inf on both sides, and inf - inf would be NaN); NaN on either side is not.
inline double closeness(const Tensor& a, const Tensor& b, double atol, double rtol) {
  EXPECT_EQ(shapeToString(a.shape()), shapeToString(b.shape()));
  std::vector<double> x = a.toVector<double>(), y = b.toVector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (x[i] == y[i]) continue;
    double r = std::abs(x[i] - y[i]) / (atol + rtol * std::abs(y[i]));
    if (!(r <= worst)) worst = r;  // NaN sticks
  }
  return worst;
}

inline Tensor gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

}  // namespace lockstep::testing
