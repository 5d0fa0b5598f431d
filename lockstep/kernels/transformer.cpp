#include "lockstep/kernels/transformer.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "lockstep/kernels/cuda/transformer.h"
#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

namespace {

void checkEmbedding(const Tensor& weight, const Tensor& indices) {
  LOCKSTEP_ENFORCE(weight.dim() == 2, ValueError, "embedding: weight must be [num_embeddings, dim], got ",
                   weight.describe());
  LOCKSTEP_ENFORCE(indices.dtype() == DType::i64, ValueError, "embedding: indices must be i64, got ",
                   indices.describe());
}

void checkIndices(const Tensor& weight, const Tensor& indices) {
  Tensor ix = indices.contiguous();
  const int64_t* p = ix.data<int64_t>();
  const int64_t v = weight.size(0);
  for (int64_t i = 0; i < ix.numel(); ++i) {
    LOCKSTEP_ENFORCE(p[i] >= 0 && p[i] < v, IndexError, "embedding: index ", p[i], " at position ", i,
                     " (row-major in indices ", shapeToString(indices.shape()), ") is out of range for ", v,
                     " embeddings");
  }
}

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

void checkRmsNorm(const Tensor& x, const Tensor& weight) {
  LOCKSTEP_ENFORCE(x.dim() >= 1 && isFloating(x.dtype()), ValueError,
                   "rms_norm: input must be floating with >= 1 dim, got ", x.describe());
  if (weight.defined()) {
    LOCKSTEP_ENFORCE(weight.dim() == 1 && weight.size(0) == lastDim(x) && weight.dtype() == x.dtype(),
                     ValueError, "rms_norm: weight ", weight.describe(), " does not fit input ", x.describe(),
                     " (needs [", lastDim(x), "] of the input's dtype)");
  }
}

RmsNormOutput rmsNormFast(const Tensor& x0, const Tensor& weight, double eps) {
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

void checkSame(const char* op, const Tensor& a, const Tensor& b) {
  LOCKSTEP_ENFORCE(a.shape() == b.shape() && a.dtype() == b.dtype() && isFloating(a.dtype()), ValueError, op,
                   ": operands must be floating tensors of one shape and dtype, got ", a.describe(), " and ",
                   b.describe());
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

void checkRotary(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  LOCKSTEP_ENFORCE(x.dim() >= 2 && isFloating(x.dtype()), ValueError,
                   "rotary: input must be floating [..., T, D], got ", x.describe());
  const int64_t t = x.size(x.dim() - 2), d = x.size(x.dim() - 1);
  LOCKSTEP_ENFORCE(d % 2 == 0, ValueError, "rotary: head dim ", d, " of ", x.describe(), " must be even");
  const Shape want{t, d / 2};
  LOCKSTEP_ENFORCE(
      cos.shape() == want && sin.shape() == want && isFloating(cos.dtype()) && isFloating(sin.dtype()),
      ValueError, "rotary: cos ", cos.describe(), " and sin ", sin.describe(), " must be floating ",
      shapeToString(want), " for input ", x.describe());
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

Tensor embeddingForward(const Tensor& weight, const Tensor& indices) {
  checkEmbedding(weight, indices);
  LOCKSTEP_ON_CUDA(weight.isCuda() ? weight : indices, cuda::embeddingForward(weight, indices));
  checkIndices(weight, indices);
  if (backendFor(weight.dtype()) == Backend::reference) return reference::embeddingForward(weight, indices);
  return embeddingGather(weight, indices);
}

Tensor embeddingBackward(const Tensor& gy, const Tensor& indices, int64_t num_rows, int64_t padding_idx) {
  LOCKSTEP_ENFORCE(gy.dim() == indices.dim() + 1 && isFloating(gy.dtype()), ValueError,
                   "embedding backward: gradient ", gy.describe(), " does not fit indices ",
                   indices.describe());
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : indices, cuda::embeddingBackward(gy, indices, num_rows, padding_idx));
  return dispatchF32Loops<embeddingBackwardFast, reference::embeddingBackward>(gy.dtype(), gy, indices,
                                                                               num_rows, padding_idx);
}

RmsNormOutput rmsNormForward(const Tensor& x, const Tensor& weight, double eps) {
  checkRmsNorm(x, weight);
  LOCKSTEP_ON_CUDA(x, cuda::rmsNormForward(x, weight, eps));
  return dispatchF32Loops<rmsNormFast, reference::rmsNormForward>(x.dtype(), x, weight, eps);
}

RmsNormGrads rmsNormBackward(const Tensor& gy, const Tensor& x, const Tensor& rstd, const Tensor& weight) {
  checkRmsNorm(x, weight);
  LOCKSTEP_ENFORCE(gy.shape() == x.shape(), ValueError, "rms_norm backward: gradient ", gy.describe(),
                   " does not match input ", x.describe());
  LOCKSTEP_ON_CUDA(x, cuda::rmsNormBackward(gy, x, rstd, weight));
  return dispatchF32Loops<rmsNormBackwardFast, reference::rmsNormBackward>(x.dtype(), gy, x, rstd, weight);
}

Tensor swigluForward(const Tensor& gate, const Tensor& up) {
  checkSame("swiglu", gate, up);
  LOCKSTEP_ON_CUDA(gate, cuda::swigluForward(gate, up));
  return dispatchF32Loops<swigluFast, reference::swigluForward>(gate.dtype(), gate, up);
}

std::pair<Tensor, Tensor> swigluBackward(const Tensor& gy, const Tensor& gate, const Tensor& up) {
  checkSame("swiglu", gate, up);
  checkSame("swiglu backward", gy, gate);
  LOCKSTEP_ON_CUDA(gate, cuda::swigluBackward(gy, gate, up));
  return dispatchF32Loops<swigluBackwardFast, reference::swigluBackward>(gate.dtype(), gy, gate, up);
}

Tensor rotaryForward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  checkRotary(x, cos, sin);
  LOCKSTEP_ON_CUDA(x, cuda::rotary(x, cos, sin, 1));
  return dispatchF32Loops<rotaryForwardFast, reference::rotaryForward>(x.dtype(), x, cos, sin);
}

Tensor rotaryBackward(const Tensor& gy, const Tensor& cos, const Tensor& sin) {
  checkRotary(gy, cos, sin);
  LOCKSTEP_ON_CUDA(gy, cuda::rotary(gy, cos, sin, -1));
  return dispatchF32Loops<rotaryBackwardFast, reference::rotaryBackward>(gy.dtype(), gy, cos, sin);
}

}  // namespace lockstep::kernels
