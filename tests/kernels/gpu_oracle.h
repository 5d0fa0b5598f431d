#pragma once
// For the GPU tests of the library-backed ops (gpu_linear/conv/pool/batch_norm_test.cpp): inputs of
// a dtype rounded on the host, so the CPU oracle (run in f64 on the same values) and the GPU see the
// same numbers, and the closeness check of a GPU result.
#include <gtest/gtest.h>

#include <string>

#include "common/check.h"
#include "common/gpu.h"

namespace lockstep::testing {

struct Tol {
  double atol, rtol;
};

/// A host tensor of `dtype` (rounded from f64 uniforms in [low, high)).
inline Tensor roundedInput(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0,
                           double high = 1.0) {
  return randomTensor(shape, DType::f64, seed, low, high).to(dtype);
}
inline Tensor asF64(const Tensor& t) { return t.defined() ? t.to(DType::f64) : t; }

/// got lives on the GPU, has `dtype` and is within tol of want (the oracle's f64 result).
inline void expectGpuClose(const Tensor& got, const Tensor& want, DType dtype, Tol tol,
                           const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(got.isCuda()) << what;
  EXPECT_EQ(got.dtype(), dtype) << what;
  EXPECT_LE(closeness(got, want, tol.atol, tol.rtol), 1.0) << what << " (" << dtypeName(dtype) << ")";
}

inline const DType kGpuFloatDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

}  // namespace lockstep::testing
