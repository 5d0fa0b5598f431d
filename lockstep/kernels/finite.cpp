#include "lockstep/kernels/finite.h"

#include "lockstep/kernels/cuda/finite.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/tensor/strided.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

namespace {
// x * 0 is 0 for a finite x and nan for an inf or a nan, so the sum of x * 0 over a run is nan
// exactly when the run holds a non-finite element: a branch-free reduction the compiler vectorises
// (std::isfinite in the loop would not be).
template <typename T>
bool runNonFinite(T* x, int64_t n, int64_t stride, T factor, bool scale) {
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
  if (x.isDense()) return runNonFinite(p, x.numel(), 1, factor, scale);
  bool bad = false;
  forEachRun<1>(x.shape(), {&x.strides()},
                [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
                  bad = runNonFinite(p + off[0], n, st[0], factor, scale) || bad;
                });
  return bad;
}

#if LOCKSTEP_WITH_CUDA
// The bool answers on a GPU: the device check, then one read of its flag.
bool onGpu(Tensor& x, double factor, bool scale) {
  Tensor found = Tensor::zeros({1}, DType::f32, x.device());
  cuda::checkNonFiniteInto(x, factor, scale, found);
  return found.item<float>() != 0.0f;
}
#endif

bool dispatch(Tensor& x, double factor, bool scale, const char* op) {
  switch (x.dtype()) {
    case DType::f32:
      return typed<float>(x, static_cast<float>(factor), scale);
    case DType::f64:
      return typed<double>(x, factor, scale);
    default:
      throw NotSupportedError(
          ::lockstep::detail::concat(op, " supports f32 and f64 tensors, got ", dtypeName(x.dtype())));
  }
}
}  // namespace

bool hasNonFinite(const Tensor& x) {
  Tensor view = x;  // shares storage; only read
  LOCKSTEP_ON_CUDA(x, onGpu(view, 1.0, false));
  return dispatch(view, 1.0, false, "hasNonFinite");
}

bool scaleAndCheckNonFinite(Tensor& x, double factor) {
  LOCKSTEP_ON_CUDA(x, onGpu(x, factor, true));
  return dispatch(x, factor, true, "scaleAndCheckNonFinite");
}

void scaleAndCheckNonFiniteInto(Tensor& x, double factor, Tensor& found_inf) {
  LOCKSTEP_ON_CUDA(x.isCuda() ? x : found_inf, cuda::checkNonFiniteInto(x, factor, true, found_inf));
  LOCKSTEP_ENFORCE(found_inf.numel() == 1 && found_inf.dtype() == DType::f32, ValueError,
                   "scaleAndCheckNonFiniteInto: found_inf must be one f32 element, got ",
                   found_inf.describe());
  if (scaleAndCheckNonFinite(x, factor)) found_inf.fill(1.0);
}

}  // namespace lockstep::kernels
