// The cpu backend's accumulation: dst += alpha * src as strided runs, low precision accumulated in
// f32 (see kernels/dispatch.h).
#include "lockstep/kernels/accumulate.h"

#include <algorithm>

#include "lockstep/kernels/tables/accumulate.h"
#include "lockstep/tensor/convert.h"
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

// dst (bf16 or f16) += alpha * src (dst's dtype or f32), any strides: each contiguous run in
// blocks widened into f32 on the stack, added, rounded back. The result is the f32 sum rounded
// once, as widening both whole gives, in one pass and without two whole f32 copies.
bool addLowPrecision(Tensor& dst, const Tensor& src, double alpha) {
  const bool bf16 = dst.dtype() == DType::bf16;
  if (!bf16 && dst.dtype() != DType::f16) return false;
  if (src.dtype() != dst.dtype() && src.dtype() != DType::f32) return false;
  const Convert16 c = convert16(bf16);
  auto* d = static_cast<uint16_t*>(dst.dataPtr());
  const bool wide = src.dtype() == DType::f32;
  const void* s = src.dataPtr();
  const float a = static_cast<float>(alpha);
  constexpr int64_t kBlock = 1024;
  alignas(64) float db[kBlock], sb[kBlock];
  // n elements from d[0], s at element offset `from`, both contiguous.
  auto run = [&](uint16_t* dd, int64_t from, int64_t n) {
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t len = std::min(kBlock, n - i0);
      c.widen(dd + i0, db, len);
      const float* sv = sb;
      if (wide) {
        sv = static_cast<const float*>(s) + from + i0;
      } else {
        c.widen(static_cast<const uint16_t*>(s) + from + i0, sb, len);
      }
      addContig(db, sv, len, a);
      c.narrow(db, dd + i0, len);
    }
  };
  if (dst.isDense() && dst.strides() == src.strides()) {
    run(d, 0, dst.numel());
    return true;
  }
  forEachRun<2>(dst.shape(), {&dst.strides(), &src.strides()},
                [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                  if (st[0] == 1 && st[1] == 1) {
                    run(d + off[0], off[1], n);
                    return;
                  }
                  for (int64_t i = 0; i < n; ++i) run(d + off[0] + i * st[0], off[1] + i * st[1], 1);
                });
  return true;
}

void addInto(Tensor& dst, const Tensor& src, double alpha) {
  if (addLowPrecision(dst, src, alpha)) return;
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
