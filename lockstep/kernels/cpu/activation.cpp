// The cpu backend's activations: GELU's tanh form as f32 vector loops (see kernels/dispatch.h).
#include "lockstep/kernels/tables/activation.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "lockstep/kernels/cpu/vector_math.h"

namespace lockstep::kernels::cpu {

namespace {

// GELU's tanh form in f32 as lockstep's own vector loops: oneDNN 2.6's AVX2 GELU (tanh) takes 8.1 ns an
// element, these 3.6 forward and 4.3 backward (AMD EPYC, one thread); oneDNN's was a tenth of a
// gpt-mini step.
constexpr float kGeluA = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluB = 0.044715f;

// |x| capped at cap (>= 0), compared as integers: non-negative floats order as their bits do, and a
// float compare would keep GCC from vectorising the loops around it. NaN's bits are above any cap.
inline float absAtMost(float x, float cap) {
  const auto bits = std::bit_cast<int32_t>(__builtin_fabsf(x)), top = std::bit_cast<int32_t>(cap);
  return std::bit_cast<float>(bits < top ? bits : top);
}

// tanh(u) = sign(u) (1 - e) / (1 + e) with e = exp(-2 |u|) <= 1: one exp, no overflow. |u| is capped
// at 20 (tanh is 1 in f32 from 9.1 on), so u = +-inf gives +-1.
inline float tanhViaExp(float u) {
  const float e = expNonPositive(-2.0f * absAtMost(u, 20.0f));
  return __builtin_copysignf((1.0f - e) / (1.0f + e), u);
}

LOCKSTEP_VECTOR_CLONES void geluTanhRun(const float* __restrict x, float* __restrict y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhViaExp(kGeluA * (v + kGeluB * v * v * v)));
  }
}

// d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u). x^2 in the last
// factor uses |x| capped at 1e4: past it 1 - t^2 is 0 anyway, and an overflowed x^2 would make 0 * inf.
LOCKSTEP_VECTOR_CLONES void geluTanhGradRun(const float* __restrict gy, const float* __restrict x,
                                            float* __restrict gx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], t = tanhViaExp(kGeluA * (v + kGeluB * v * v * v)), vc = absAtMost(v, 1e4f);
    const float du = kGeluA * (1.0f + 3.0f * kGeluB * vc * vc);
    gx[i] = gy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

constexpr int64_t kGeluChunk = 16384;  // per thread task; the loops are split only past 4 chunks

// A dense x (contiguous, transposed, channels_last) is read as one flat buffer and y takes its
// layout, as every other activation here (oneDNN's, the reference's) and on a GPU returns it; only
// a view with gaps or overlaps is made contiguous first.
Tensor denseOrContiguous(const Tensor& t) { return t.isDense() ? t : t.contiguous(); }

Tensor geluTanhF32(const Tensor& x0) {
  const Tensor x = denseOrContiguous(x0);
  Tensor y = Tensor::emptyLike(x);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 4 * kGeluChunk)
  for (int64_t i = 0; i < n; i += kGeluChunk) geluTanhRun(px + i, py + i, std::min(kGeluChunk, n - i));
  return y;
}

Tensor geluTanhGradF32(const Tensor& gy0, const Tensor& x0) {
  // gx takes x's dense layout; gy is read in that layout (and as f32) too, so the flat loop pairs
  // the elements.
  const Tensor x = denseOrContiguous(x0);
  Tensor gy = gy0;
  if (gy.strides() != x.strides() || gy.dtype() != DType::f32) {
    gy = Tensor::emptyLike(x);
    gy.copyFrom(gy0);
  }
  Tensor gx = Tensor::emptyLike(x);
  const float *pg = gy.data<float>(), *px = x.data<float>();
  float* pgx = gx.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 4 * kGeluChunk)
  for (int64_t i = 0; i < n; i += kGeluChunk)
    geluTanhGradRun(pg + i, px + i, pgx + i, std::min(kGeluChunk, n - i));
  return gx;
}

}  // namespace

const ActivationKernels kActivation{
    .geluTanhForward = &geluTanhF32,
    .geluTanhBackward = &geluTanhGradF32,
};

}  // namespace lockstep::kernels::cpu
