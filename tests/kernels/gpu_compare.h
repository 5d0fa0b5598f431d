#pragma once
// Shared by tests/kernels/gpu_*_test.cpp: random CPU inputs, their GPU copies, and the check that a
// GPU kernel's result lives on the GPU and is close to the CPU kernel's for its dtype, or, for
// transcendental math and the library-backed ops, to the f64 oracle's. One tolerance function,
// tolFor(dtype, class), holds every comparison.
#include <gtest/gtest.h>

#include <string>

#include "common/check.h"
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

/// The tolerance a GPU kernel is held to against the CPU or the f64 oracle.
struct Tol {
  double atol, rtol;
};
/// Bitwise equality (up to the sign of zero) for ops that do the same IEEE operations as the CPU.
inline constexpr Tol kExact{1e-300, 0.0};

/// How much a kind of op may differ from the CPU or the oracle beyond its dtype's rounding.
enum class OpClass {
  elementwise,  // a few roundings: bf16 and f16 compute in f32 on both sides and round the result
  pool,         // sums of a window, in another order
  batch_norm,   // per-channel statistics reduced in another order
  gemm,         // cuBLASLt's blocked sums (TF32 off), bf16/f16 inputs with f32 accumulation
  conv,         // cuDNN's algorithms (Winograd, FFT) against direct sums
  attention,    // D products per score and S terms per output in another order than the CPU's 64 x 64
                // f32 blocks; bf16/f16 tensor-core products may round P and dS to the input dtype
};

/// The one tolerance function of the GPU tests: (dtype, kind of op).
inline Tol tolFor(DType t, OpClass c = OpClass::elementwise) {
  struct Row {
    Tol f64, f32, f16, bf16;
  };
  static constexpr Row kRows[] = {
      /* elementwise */ {{1e-12, 1e-10}, {2e-6, 2e-5}, {2e-3, 4e-3}, {1e-2, 1.6e-2}},
      /* pool        */ {{1e-12, 1e-12}, {1e-6, 1e-5}, {1e-3, 2e-3}, {1e-2, 1e-2}},
      /* batch_norm  */ {{1e-10, 1e-10}, {1e-5, 1e-5}, {5e-3, 5e-3}, {3e-2, 2e-2}},
      /* gemm        */ {{1e-10, 1e-10}, {1e-4, 1e-4}, {2e-2, 1e-2}, {6e-2, 2e-2}},  // bf16: 8-bit mantissa
      /* conv        */ {{1e-9, 1e-9}, {1e-2, 1e-2}, {3e-2, 1e-2}, {1e-1, 3e-2}},
      /* attention   */ {{1e-10, 1e-9}, {2e-5, 1e-4}, {4e-3, 8e-3}, {2e-2, 3.2e-2}},
  };
  const Row& r = kRows[static_cast<int>(c)];
  switch (t) {
    case DType::f64:
      return r.f64;
    case DType::f16:
      return r.f16;
    case DType::bf16:
      return r.bf16;
    default:
      return r.f32;
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

/// A host tensor of `dtype` (rounded from f64 uniforms in [low, high)), so that the f64 oracle and
/// the GPU see the same numbers.
inline Tensor roundedInput(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0,
                           double high = 1.0) {
  return randomTensor(shape, DType::f64, seed, low, high).to(dtype);
}
inline Tensor asF64(const Tensor& t) { return t.defined() ? t.to(DType::f64) : t; }

/// t's copy on cuda:0, in channels_last when asked.
inline Tensor onGpu(const Tensor& t, bool channels_last) {
  Tensor g = gpu(t);
  return channels_last ? g.toFormat(MemoryFormat::channels_last) : g;
}

/// got lives on the GPU, has `dtype` and is within tol of want (the oracle's f64 result).
inline void expectGpuClose(const Tensor& got, const Tensor& want, DType dtype, Tol tol,
                           const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(got.isCuda()) << what;
  EXPECT_EQ(got.dtype(), dtype) << what;
  EXPECT_LE(closeness(got, want, tol.atol, tol.rtol), 1.0) << what << " (" << dtypeName(dtype) << ")";
}

}  // namespace lockstep::testing
