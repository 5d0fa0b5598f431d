// The cpu backend's activations (see kernels/dispatch.h): relu and leaky_relu's gradient in every
// floating dtype, and GELU's tanh form as f32 vector loops.
#include "lockstep/kernels/tables/activation.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "lockstep/kernels/cpu/chunks.h"
#include "lockstep/kernels/cpu/vector_math.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/layout.h"

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

Tensor geluTanhF32(const Tensor& x0) {
  const Tensor x = dense(x0);
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
  const Tensor x = dense(x0);
  const Tensor gy = laidOutLike(gy0, x);
  Tensor gx = Tensor::emptyLike(x);
  const float *pg = gy.data<float>(), *px = x.data<float>();
  float* pgx = gx.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 4 * kGeluChunk)
  for (int64_t i = 0; i < n; i += kGeluChunk)
    geluTanhGradRun(pg + i, px + i, pgx + i, std::min(kGeluChunk, n - i));
  return gx;
}

// relu as torch.relu: y = x < 0 ? 0 : x, so a NaN stays a NaN and -0.0 stays -0.0; its gradient
// passes where !(y <= 0), a NaN output's included (torch's threshold_backward). oneDNN 2.6's relu, a
// max against 0, turns a NaN into 0: a network whose weights had gone NaN reported a finite loss and
// trained on. The 16-bit floats are judged on their bits (sign set, not a NaN, not -0.0: below 0),
// so no conversion is needed; `inf` is the format's +infinity, the largest non-NaN magnitude.
inline bool belowZero16(uint16_t v, uint16_t inf) {
  const uint16_t m = v & 0x7FFF;
  return (v & 0x8000) != 0 && m != 0 && m <= inf;
}
inline bool atMostZero16(uint16_t v, uint16_t inf) { return (v & 0x7FFF) == 0 || belowZero16(v, inf); }
uint16_t infinityBits(DType t) { return t == DType::bf16 ? 0x7F80 : 0x7C00; }

// x and y may be the same buffer (reluInPlace): each element is read before it is written.
LOCKSTEP_VECTOR_CLONES void reluRun(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}
LOCKSTEP_VECTOR_CLONES void reluGradRun(const float* __restrict gy, const float* __restrict y,
                                        float* __restrict gx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = y[i] <= 0.0f ? 0.0f : gy[i];
}
LOCKSTEP_VECTOR_CLONES void reluRun16(const uint16_t* x, uint16_t* y, int64_t n, uint16_t inf) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = belowZero16(x[i], inf) ? uint16_t{0} : x[i];
}
LOCKSTEP_VECTOR_CLONES void reluGradRun16(const uint16_t* __restrict gy, const uint16_t* __restrict y,
                                          uint16_t* __restrict gx, int64_t n, uint16_t inf) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = atMostZero16(y[i], inf) ? uint16_t{0} : gy[i];
}

constexpr int64_t kReluChunk = 65536;  // elements per thread task (memory-bound: big chunks)

// y = relu(x) over the two dense tensors of one layout and dtype as flat buffers.
void reluInto(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  if (x.dtype() == DType::f32) {
    const float* px = x.data<float>();
    float* py = y.data<float>();
    forEachChunk(n, kReluChunk, [&](int64_t, int64_t b, int64_t e) { reluRun(px + b, py + b, e - b); });
  } else {
    LOCKSTEP_CHECK(isLowPrecision(x.dtype()), "relu: the cpu loops take f32, bf16 and f16, not ",
                   dtypeName(x.dtype()));
    const auto* px = static_cast<const uint16_t*>(x.dataPtr());
    auto* py = static_cast<uint16_t*>(y.dataPtr());
    const uint16_t inf = infinityBits(x.dtype());
    forEachChunk(n, kReluChunk,
                 [&](int64_t, int64_t b, int64_t e) { reluRun16(px + b, py + b, e - b, inf); });
  }
}

Tensor reluForward(const Tensor& x0) {
  const Tensor x = dense(x0);
  Tensor y = Tensor::emptyLike(x);
  reluInto(x, y);
  return y;
}

Tensor reluBackward(const Tensor& gy0, const Tensor& y0) {
  // gx takes y's dense layout and dtype; gy is read in that layout and dtype too, so the flat loop
  // pairs the elements.
  const Tensor y = dense(y0);
  const Tensor gy = laidOutLike(gy0, y);
  Tensor gx = Tensor::emptyLike(y);
  const int64_t n = y.numel();
  if (y.dtype() == DType::f32) {
    const float *pg = gy.data<float>(), *py = y.data<float>();
    float* pgx = gx.data<float>();
    forEachChunk(n, kReluChunk,
                 [&](int64_t, int64_t b, int64_t e) { reluGradRun(pg + b, py + b, pgx + b, e - b); });
  } else {
    LOCKSTEP_CHECK(isLowPrecision(y.dtype()), "relu backward: the cpu loops take f32, bf16 and f16, not ",
                   dtypeName(y.dtype()));
    const auto *pg = static_cast<const uint16_t*>(gy.dataPtr()),
               *py = static_cast<const uint16_t*>(y.dataPtr());
    auto* pgx = static_cast<uint16_t*>(gx.dataPtr());
    const uint16_t inf = infinityBits(y.dtype());
    forEachChunk(n, kReluChunk,
                 [&](int64_t, int64_t b, int64_t e) { reluGradRun16(pg + b, py + b, pgx + b, e - b, inf); });
  }
  return gx;
}

// leaky_relu's gradient as torch's leaky_relu_backward: x > 0 ? gy : gy * slope, so a NaN input takes
// the slope (oneDNN 2.6's passes gy there). bf16/f16 are computed in f32 and rounded, as torch's
// vectorised CPU kernel does.
LOCKSTEP_VECTOR_CLONES void leakyReluGradRun(const float* __restrict gy, const float* __restrict x,
                                             float* __restrict gx, int64_t n, float slope) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = x[i] > 0.0f ? gy[i] : gy[i] * slope;
}

Tensor leakyReluBackward(const Tensor& gy0, const Tensor& x0, double slope) {
  const DType dtype = x0.dtype();
  LOCKSTEP_CHECK(dtype == DType::f32 || isLowPrecision(dtype),
                 "leaky_relu backward: the cpu loops take f32, bf16 and f16, not ", dtypeName(dtype));
  // gx takes x's dense layout; gy is read in that layout and as f32, so the flat loop pairs them.
  const Tensor x = dense(x0).to(DType::f32);
  const Tensor gy = laidOutLike(gy0.to(DType::f32), x);
  Tensor gx = Tensor::emptyLike(x);
  const float *pg = gy.data<float>(), *px = x.data<float>();
  float* pgx = gx.data<float>();
  const auto s = static_cast<float>(slope);
  forEachChunk(x.numel(), kReluChunk,
               [&](int64_t, int64_t b, int64_t e) { leakyReluGradRun(pg + b, px + b, pgx + b, e - b, s); });
  return dtype == DType::f32 ? gx : gx.to(dtype);
}

}  // namespace

void reluInPlace(const Tensor& y) {
  LOCKSTEP_CHECK(y.isDense(), "reluInPlace: ", y.describe(), " is not dense");
  reluInto(y, y);
}

const ActivationKernels kActivation{
    .reluForward = &reluForward,
    .reluBackward = &reluBackward,
    .leakyReluBackward = &leakyReluBackward,
    .geluTanhForward = &geluTanhF32,
    .geluTanhBackward = &geluTanhGradF32,
};

}  // namespace lockstep::kernels::cpu
