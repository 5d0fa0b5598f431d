// The cpu backend's in-place scaling: one flat loop over the dense block (see kernels/dispatch.h).
#include "lockstep/kernels/scale.h"

#include "lockstep/kernels/cpu/chunks.h"
#include "lockstep/kernels/cpu/vector_math.h"
#include "lockstep/kernels/tables/scale.h"

namespace lockstep::kernels::cpu {

namespace {

template <typename T>
LOCKSTEP_VECTOR_CLONES_TEMPLATE void scaleRun(T* __restrict p, int64_t n, T f) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) p[i] *= f;
}

template <typename T>
void scaleDense(T* p, int64_t n, T f) {
  forEachChunk(n, int64_t{1} << 16, [&](int64_t, int64_t b, int64_t e) { scaleRun(p + b, e - b, f); });
}

void scaleInPlace(Tensor& x, double factor) {
  // Dense: every element is in one block from dataPtr(), whatever the dimension order.
  const int64_t n = x.numel();
  if (x.dtype() == DType::f32) {
    scaleDense(x.data<float>(), n, static_cast<float>(factor));
  } else if (x.dtype() == DType::f64) {
    scaleDense(x.data<double>(), n, factor);
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
