// The cpu backend's non-finite checks: a branch-free scan of f32/f64 tensors, optionally scaling
// them in the same pass; bf16/f16 through f32 copies (see kernels/dispatch.h).
#include "lockstep/kernels/finite.h"

#include <atomic>

#include "lockstep/kernels/cpu/chunks.h"
#include "lockstep/kernels/cpu/vector_math.h"
#include "lockstep/kernels/tables/finite.h"
#include "lockstep/tensor/strided.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels::cpu {

namespace {

// x * 0 is 0 for a finite x and nan for an inf or a nan, so the sum of x * 0 over a run is nan
// exactly when the run holds a non-finite element: a branch-free reduction the compiler vectorises
// (std::isfinite in the loop would not be).
template <typename T>
LOCKSTEP_VECTOR_CLONES_TEMPLATE bool runNonFinite(T* x, int64_t n, int64_t stride, T factor, bool scale) {
  T acc = 0;
  if (stride == 1) {
    if (scale) {
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < n; ++i) {
        x[i] *= factor;
        acc += x[i] * T(0);
      }
    } else {
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < n; ++i) acc += x[i] * T(0);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      if (scale) x[i * stride] *= factor;
      acc += x[i * stride] * T(0);
    }
  }
  return acc != acc;
}

template <typename T>
bool typed(Tensor& x, T factor, bool scale) {
  T* p = static_cast<T*>(x.dataPtr());
  if (x.isDense()) {
    // Threads take whole chunks; the answer (any non-finite element) is the same however they do.
    std::atomic<bool> bad{false};
    forEachChunk(x.numel(), int64_t{1} << 16, [&](int64_t, int64_t b, int64_t e) {
      if (runNonFinite(p + b, e - b, 1, factor, scale)) bad.store(true, std::memory_order_relaxed);
    });
    return bad.load();
  }
  bool bad = false;
  forEachRun<1>(x.shape(), {&x.strides()},
                [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
                  bad = runNonFinite(p + off[0], n, st[0], factor, scale) || bad;
                });
  return bad;
}

bool scaleAndCheck(Tensor& x, double factor, bool scale) {
  switch (x.dtype()) {
    case DType::f32:
      return typed<float>(x, static_cast<float>(factor), scale);
    case DType::f64:
      return typed<double>(x, factor, scale);
    case DType::bf16:
    case DType::f16: {
      // As on a GPU: widened to f32 (exactly), scaled there by float(factor), rounded once, and the
      // stored value decides (a 16-bit result can overflow where the f32 one does not).
      Tensor wide = x.to(DType::f32);
      if (!scale) return typed<float>(wide, 1.0f, false);
      typed<float>(wide, static_cast<float>(factor), true);
      x.copyFrom(wide);
      Tensor stored = x.to(DType::f32);
      return typed<float>(stored, 1.0f, false);
    }
    default:
      throw NotSupportedError(::lockstep::detail::concat(scale ? "scaleAndCheckNonFinite" : "hasNonFinite",
                                                         " supports floating tensors, got ",
                                                         dtypeName(x.dtype())));
  }
}

void scaleAndCheckInto(Tensor& x, double factor, Tensor& found_inf) {
  LOCKSTEP_ENFORCE(found_inf.numel() == 1 && found_inf.dtype() == DType::f32, ValueError,
                   "scaleAndCheckNonFiniteInto: found_inf must be one f32 element, got ",
                   found_inf.describe());
  if (scaleAndCheck(x, factor, true)) found_inf.fill(1.0);
}

}  // namespace

const FiniteKernels kFinite{LOCKSTEP_FINITE_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::cpu
