// The cpu backend's transformer ops: f32 loops for RMSNorm, SwiGLU, rotary embeddings and the
// embedding gradient, and the embedding gather, a row copy for every dtype (see kernels/dispatch.h).
#include "lockstep/kernels/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lockstep/kernels/tables/transformer.h"

namespace lockstep::kernels::cpu {

namespace {

Shape embeddingShape(const Tensor& indices, int64_t d) {
  Shape s = indices.shape();
  s.push_back(d);
  return s;
}

// A gather of whole rows: no arithmetic, so every dtype takes the same memcpy path.
Tensor embeddingGather(const Tensor& weight0, const Tensor& indices) {
  Tensor w = weight0.contiguous(), ix = indices.contiguous();
  const int64_t d = w.size(1), n = ix.numel();
  Tensor y = Tensor::empty(embeddingShape(indices, d), w.dtype());
  const size_t row_bytes = static_cast<size_t>(d) * w.elementSize();
  const auto* src = static_cast<const char*>(w.dataPtr());
  auto* dst = static_cast<char*>(y.dataPtr());
  const int64_t* p = ix.data<int64_t>();
#pragma omp parallel for schedule(static) if (n * d > 65536)
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * row_bytes, src + p[i] * row_bytes, row_bytes);
  return y;
}

Tensor embeddingBackwardFast(const Tensor& gy0, const Tensor& indices, int64_t num_rows,
                             int64_t padding_idx) {
  Tensor gy = gy0.contiguous(), ix = indices.contiguous();
  const int64_t d = gy.size(gy.dim() - 1), n = ix.numel();
  Tensor gw = Tensor::zeros({num_rows, d}, DType::f32);
  float* pw = gw.data<float>();
  const float* pg = gy.data<float>();
  const int64_t* p = ix.data<int64_t>();
  // Threads own column ranges, so repeated indices accumulate without races and in a fixed order.
  const int64_t chunk = 64;
#pragma omp parallel for schedule(static) if (n * d > 262144)
  for (int64_t c0 = 0; c0 < d; c0 += chunk) {
    const int64_t c1 = std::min(d, c0 + chunk);
    for (int64_t i = 0; i < n; ++i) {
      if (p[i] == padding_idx) continue;
      float* row = pw + p[i] * d;
      const float* g = pg + i * d;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  }
  return gw;
}

int64_t lastDim(const Tensor& x) { return x.dim() == 0 ? 1 : x.size(x.dim() - 1); }

// y in x's dtype whatever y_dtype says: kernels::rmsNormForward rounds it.
RmsNormOutput rmsNormFast(const Tensor& x0, const Tensor& weight, double eps, DType /*y_dtype*/) {
  Tensor x = x0.contiguous();
  const int64_t d = lastDim(x), rows = d == 0 ? 0 : x.numel() / d;
  Tensor y = Tensor::empty(x.shape(), DType::f32), rstd = Tensor::empty({rows}, DType::f32);
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const float* px = x.data<float>();
  const float* pw = w.defined() ? w.data<float>() : nullptr;
  float *py = y.data<float>(), *pr = rstd.data<float>();
#pragma omp parallel for schedule(static) if (rows * d > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * d;
    float* yr = py + r * d;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const float s = 1.0f / std::sqrt(ss / static_cast<float>(d) + static_cast<float>(eps));
    pr[r] = s;
    if (pw) {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * s * pw[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * s;
    }
  }
  return {y, rstd};
}

// gx = r (g w - x r^2 mean(g w x)); gw = sum over rows of g x r.
RmsNormGrads rmsNormBackwardFast(const Tensor& gy0, const Tensor& x0, const Tensor& rstd,
                                 const Tensor& weight) {
  Tensor x = x0.contiguous(), gy = gy0.contiguous();
  const int64_t d = lastDim(x), rows = d == 0 ? 0 : x.numel() / d;
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor gx = Tensor::empty(x.shape(), DType::f32);
  const float *px = x.data<float>(), *pg = gy.data<float>(), *pr = rstd.data<float>();
  const float* pw = w.defined() ? w.data<float>() : nullptr;
  float* pgx = gx.data<float>();
  const float inv_d = 1.0f / static_cast<float>(d);
#pragma omp parallel for schedule(static) if (rows * d > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = px + r * d, *gr = pg + r * d;
    float* o = pgx + r * d;
    const float s = pr[r];
    float dot = 0;
    if (pw) {
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < d; ++i) dot += gr[i] * pw[i] * xr[i];
      const float c = s * s * dot * inv_d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) o[i] = s * (gr[i] * pw[i] - xr[i] * c);
    } else {
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < d; ++i) dot += gr[i] * xr[i];
      const float c = s * s * dot * inv_d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) o[i] = s * (gr[i] - xr[i] * c);
    }
  }
  Tensor gw;
  if (pw) {
    gw = Tensor::zeros({d}, DType::f32);
    float* pgw = gw.data<float>();
    // Columns split across threads: each sums its columns over all rows in row order.
    const int64_t chunk = 64;
#pragma omp parallel for schedule(static) if (rows * d > 262144)
    for (int64_t c0 = 0; c0 < d; c0 += chunk) {
      const int64_t c1 = std::min(d, c0 + chunk);
      for (int64_t r = 0; r < rows; ++r) {
        const float *xr = px + r * d, *gr = pg + r * d;
        const float s = pr[r];
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) pgw[c] += gr[c] * xr[c] * s;
      }
    }
  }
  return {gx, gw};
}

inline float sigmoidF(float x) { return 1.0f / (1.0f + std::exp(-x)); }

Tensor swigluFast(const Tensor& g0, const Tensor& u0) {
  Tensor g = g0.contiguous(), u = u0.contiguous();
  Tensor y = Tensor::empty(g.shape(), DType::f32);
  const float *pg = g.data<float>(), *pu = u.data<float>();
  float* py = y.data<float>();
  const int64_t n = g.numel();
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) py[i] = pg[i] * sigmoidF(pg[i]) * pu[i];
  return y;
}

std::pair<Tensor, Tensor> swigluBackwardFast(const Tensor& gy0, const Tensor& g0, const Tensor& u0) {
  Tensor gy = gy0.contiguous(), g = g0.contiguous(), u = u0.contiguous();
  Tensor gg = Tensor::empty(g.shape(), DType::f32), gu = Tensor::empty(g.shape(), DType::f32);
  const float *py = gy.data<float>(), *pg = g.data<float>(), *pu = u.data<float>();
  float *pgg = gg.data<float>(), *pgu = gu.data<float>();
  const int64_t n = g.numel();
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoidF(pg[i]);
    pgu[i] = py[i] * pg[i] * s;
    pgg[i] = py[i] * pu[i] * s * (1.0f + pg[i] * (1.0f - s));
  }
  return {gg, gu};
}

// sign = +1: forward rotation; -1: its inverse (the backward).
Tensor rotaryFast(const Tensor& x0, const Tensor& cos0, const Tensor& sin0, float sign) {
  Tensor x = x0.contiguous(), c = cos0.to(DType::f32).contiguous(), s = sin0.to(DType::f32).contiguous();
  const int64_t t = x.size(x.dim() - 2), d = x.size(x.dim() - 1), h = d / 2;
  const int64_t rows = x.numel() / std::max<int64_t>(d, 1);
  Tensor y = Tensor::empty(x.shape(), DType::f32);
  const float *px = x.data<float>(), *pc = c.data<float>(), *ps = s.data<float>();
  float* py = y.data<float>();
#pragma omp parallel for schedule(static) if (x.numel() > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float *x1 = px + r * d, *x2 = x1 + h, *cr = pc + (r % t) * h, *sr = ps + (r % t) * h;
    float *y1 = py + r * d, *y2 = y1 + h;
#pragma omp simd
    for (int64_t i = 0; i < h; ++i) {
      const float sn = sign * sr[i];
      y1[i] = x1[i] * cr[i] - x2[i] * sn;
      y2[i] = x2[i] * cr[i] + x1[i] * sn;
    }
  }
  return y;
}
Tensor rotaryForwardFast(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  return rotaryFast(x, cos, sin, 1.0f);
}
Tensor rotaryBackwardFast(const Tensor& gy, const Tensor& cos, const Tensor& sin) {
  return rotaryFast(gy, cos, sin, -1.0f);
}

}  // namespace

const TransformerKernels kTransformer{
    .embeddingForward = &embeddingGather,
    .embeddingBackward = &embeddingBackwardFast,
    .rmsNormForward = &rmsNormFast,
    .rmsNormBackward = &rmsNormBackwardFast,
    .swigluForward = &swigluFast,
    .swigluBackward = &swigluBackwardFast,
    .rotaryForward = &rotaryForwardFast,
    .rotaryBackward = &rotaryBackwardFast,
};

}  // namespace lockstep::kernels::cpu
