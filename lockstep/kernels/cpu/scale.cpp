// The cpu backend's in-place scaling: one flat loop over the dense block (see kernels/dispatch.h).
#include "lockstep/kernels/scale.h"

#include "lockstep/kernels/tables/scale.h"

namespace lockstep::kernels::cpu {

namespace {

void scaleInPlace(Tensor& x, double factor) {
  // Dense: every element is in one block from dataPtr(), whatever the dimension order.
  const int64_t n = x.numel();
  if (x.dtype() == DType::f32) {
    float* p = x.data<float>();
    const float f = static_cast<float>(factor);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  } else if (x.dtype() == DType::f64) {
    double* p = x.data<double>();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] *= factor;
  } else {
    Tensor f = x.to(DType::f32);
    scaleInPlace(f, factor);
    x.copyFrom(f);
  }
}

// The factor read on the host, then as above (its value cast to f32 for f32 and 16-bit x).
void scaleInPlaceBy(Tensor& x, const Tensor& factor) { scaleInPlace(x, factor.itemDouble()); }

}  // namespace

const ScaleKernels kScale{LOCKSTEP_SCALE_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::cpu
