#pragma once
// Shared by tests/kernels/gpu_*_test.cpp: random CPU inputs, their GPU copies, and the check that a
// GPU kernel's result lives on the GPU and is close to the CPU kernel's for its dtype, or, for
// transcendental math, to the f64 oracle's (oracle()).
#include <gtest/gtest.h>

#include <string>

#include "common/gpu.h"
#include "lockstep/tensor.h"

namespace lockstep::testing {

/// U[low, high) of the given shape and dtype on the host, from a fixed seed.
inline Tensor hostRandom(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0,
                         double high = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  Generator g(seed);
  g.uniform(t, low, high);
  return t;
}

/// The tolerance a GPU kernel is held to against the CPU: a few roundings of the dtype (bf16 and
/// f16 compute in f32 on both sides, so they differ by at most a rounding of the result).
struct Tol {
  double atol, rtol;
};
/// Bitwise equality (up to the sign of zero) for ops that do the same IEEE operations as the CPU.
inline constexpr Tol kExact{1e-300, 0.0};
inline Tol tolFor(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-12, 1e-10};
    case DType::bf16:
      return {1e-2, 1.6e-2};
    case DType::f16:
      return {2e-3, 4e-3};
    default:
      return {2e-6, 2e-5};
  }
}

/// Asserts that gpu_result is on cuda:0, has cpu_result's shape and dtype, and is close to it.
inline ::testing::AssertionResult gpuMatches(const Tensor& gpu_result, const Tensor& cpu_result, Tol tol,
                                             const std::string& what = "") {
  if (!gpu_result.isCuda()) return ::testing::AssertionFailure() << what << ": result not on the GPU";
  if (gpu_result.dtype() != cpu_result.dtype())
    return ::testing::AssertionFailure()
           << what << ": dtype " << dtypeName(gpu_result.dtype()) << " vs " << dtypeName(cpu_result.dtype());
  if (gpu_result.shape() != cpu_result.shape())
    return ::testing::AssertionFailure() << what << ": shape " << shapeToString(gpu_result.shape()) << " vs "
                                         << shapeToString(cpu_result.shape());
  const double c = closeness(gpu_result, cpu_result, tol.atol, tol.rtol);
  if (!(c <= 1.0)) return ::testing::AssertionFailure() << what << ": closeness " << c << " > 1";
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult gpuMatches(const Tensor& gpu_result, const Tensor& cpu_result,
                                             const std::string& what = "") {
  return gpuMatches(gpu_result, cpu_result, tolFor(cpu_result.dtype()), what);
}

/// The f64 oracle's operand: a floating tensor widened to f64 (same layout); integer tensors (class
/// targets) and undefined ones as they are.
inline Tensor f64(const Tensor& t) { return t.defined() && isFloating(t.dtype()) ? t.to(DType::f64) : t; }

/// The exact result a GPU kernel of transcendental math (exp, log, pow, tanh, erf, softmax) is held
/// to: the kernel run on f64 operands (the reference loops, f64 with libm, exact but for an ulp of
/// f64) rounded once to `dtype`. Not the CPU kernel on the operands themselves: oneDNN 2.6's f32
/// eltwise_log and log-softmax are approximations up to 3.7e-6 off in absolute terms (near log 1 = 0
/// that is 2e5 ulps, past the f32 tolerance), while CUDA's logf/expf are within 2 ulps.
inline Tensor oracle(const Tensor& exact64, DType dtype) { return exact64.to(dtype); }

inline const DType kFloatDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

}  // namespace lockstep::testing
