// The cpu backend's accumulation: dst += alpha * src as strided runs, low precision accumulated in
// f32 (see kernels/dispatch.h).
#include "lockstep/kernels/accumulate.h"

#include "lockstep/kernels/tables/accumulate.h"
#include "lockstep/tensor/strided.h"

namespace lockstep::kernels::cpu {

namespace {

template <typename T>
void addContig(T* d, const T* s, int64_t n, T alpha) {
  if (alpha == T(1)) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] += alpha * s[i];
  }
}

template <typename T>
void addTyped(Tensor& dst, const Tensor& src, double alpha) {
  T* d = static_cast<T*>(dst.dataPtr());
  const T* s = static_cast<const T*>(src.dataPtr());
  const T a = static_cast<T>(alpha);
  if (dst.isDense() && dst.strides() == src.strides()) {
    addContig(d, s, dst.numel(), a);
    return;
  }
  forEachRun<2>(dst.shape(), {&dst.strides(), &src.strides()},
                [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                  if (st[0] == 1 && st[1] == 1) {
                    addContig(d + off[0], s + off[1], n, a);
                  } else {
                    for (int64_t i = 0; i < n; ++i) d[off[0] + i * st[0]] += a * s[off[1] + i * st[1]];
                  }
                });
}

void addInto(Tensor& dst, const Tensor& src, double alpha) {
  Tensor s = src.dtype() == dst.dtype() ? src : src.to(dst.dtype());
  switch (dst.dtype()) {
    case DType::f32:
      addTyped<float>(dst, s, alpha);
      break;
    case DType::f64:
      addTyped<double>(dst, s, alpha);
      break;
    default: {
      // Low-precision storage: accumulate in f32.
      Tensor d32 = dst.to(DType::f32);
      Tensor s32 = src.to(DType::f32);
      addTyped<float>(d32, s32, alpha);
      dst.copyFrom(d32);
    }
  }
}

}  // namespace

const AccumulateKernels kAccumulate{LOCKSTEP_ACCUMULATE_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::cpu
