// The cpu backend's element-wise math (neg, exp, log, sqrt, pow and their gradients) in f32, as
// torch computes it (see kernels/dispatch.h; bf16 and f16 are widened to it). oneDNN 2.6's eltwise
// primitives were replaced: their exp turned a NaN into +inf, their log was off by ~1.4e-6 around 1
// (the wrong sign just above it) and flushed denormals, and neg(+0) gave +0. These are libm's
// functions, correctly rounded or within an ulp; none of them is on a training step's hot path.
#include "lockstep/kernels/unary.h"

#include <cmath>

#include "lockstep/kernels/cpu/chunks.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/kernels/tables/unary.h"

namespace lockstep::kernels::cpu {

namespace {

constexpr int64_t kChunk = 32768;  // elements per thread task

template <typename Fn>
void map(const float* x, float* y, int64_t n, Fn fn) {
  forEachChunk(n, kChunk, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = fn(x[i]);
  });
}

template <typename Fn>
void map2(const float* g, const float* s, float* y, int64_t n, Fn fn) {
  forEachChunk(n, kChunk, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = fn(g[i], s[i]);
  });
}

Tensor unaryF32(UnaryOp op, const Tensor& x0, double p) {
  const Tensor x = dense(x0);
  Tensor y = Tensor::emptyLike(x);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const int64_t n = x.numel();
  switch (op) {
    case UnaryOp::neg:
      map(px, py, n, [](float v) { return -v; });
      break;
    case UnaryOp::exp:
      map(px, py, n, [](float v) { return std::exp(v); });
      break;
    case UnaryOp::log:
      map(px, py, n, [](float v) { return std::log(v); });
      break;
    case UnaryOp::sqrt:
      map(px, py, n, [](float v) { return std::sqrt(v); });
      break;
    case UnaryOp::pow:
      map(px, py, n, [p](float v) { return powOfScalar(v, p); });
      break;
  }
  return y;
}

// `saved` is y for exp and sqrt, x for the others (kernels/unary.h); gx takes its layout.
Tensor unaryBackwardF32(UnaryOp op, const Tensor& gy0, const Tensor& saved0, double p) {
  const Tensor saved = dense(saved0);
  const Tensor gy = laidOutLike(gy0, saved);
  Tensor gx = Tensor::emptyLike(saved);
  const float *pg = gy.data<float>(), *ps = saved.data<float>();
  float* px = gx.data<float>();
  const int64_t n = saved.numel();
  switch (op) {
    case UnaryOp::neg:
      map2(pg, ps, px, n, [](float g, float) { return -g; });
      break;
    case UnaryOp::exp:
      map2(pg, ps, px, n, [](float g, float y) { return g * y; });
      break;
    case UnaryOp::log:
      map2(pg, ps, px, n, [](float g, float x) { return g / x; });
      break;
    case UnaryOp::sqrt:
      map2(pg, ps, px, n, [](float g, float y) { return g / (2.0f * y); });
      break;
    case UnaryOp::pow:
      // torch's pow_backward: g * p * x^(p - 1), and 0 for p = 0 (not the output over x, which
      // overflows before the gradient does and is 0/0 at x = 0).
      if (p == 0.0) {
        map2(pg, ps, px, n, [](float, float) { return 0.0f; });
      } else {
        const float pf = static_cast<float>(p);
        map2(pg, ps, px, n, [p, pf](float g, float x) { return g * (pf * powOfScalar(x, p - 1.0)); });
      }
      break;
  }
  return gx;
}

}  // namespace

const UnaryKernels kUnary{.unary = &unaryF32, .unaryBackward = &unaryBackwardF32};

}  // namespace lockstep::kernels::cpu
