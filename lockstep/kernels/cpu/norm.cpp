// The cpu backend's gradient norms and clipping: host loops in f64 (see kernels/dispatch.h).
#include "lockstep/kernels/norm.h"

#include <algorithm>
#include <cmath>

#include "lockstep/kernels/tables/norm.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels::cpu {

namespace {

double normOnHost(const Tensor& g, double p) {
  const Tensor c = g.to(DType::f64).contiguous();
  const double* x = c.data<double>();
  const int64_t n = c.numel();
  if (std::isinf(p)) {
    double m = 0.0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(x[i]));
    return m;
  }
  double s = 0.0;
  if (p == 2.0) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
    return std::sqrt(s);
  }
  for (int64_t i = 0; i < n; ++i) s += std::pow(std::abs(x[i]), p);
  return std::pow(s, 1.0 / p);
}

// The clip coefficient as clipGradNorm has always computed it; NaN propagates, as in PyTorch.
double clipCoefficient(double total, double max_norm) {
  const double raw = max_norm / (total + 1e-6);
  return std::isnan(raw) ? raw : std::min(1.0, raw);
}

void scaleOnHost(Tensor g, double coef) {
  LOCKSTEP_ENFORCE(isFloating(g.dtype()), NotSupportedError, "clipGradNorm supports floating gradients, got ",
                   dtypeName(g.dtype()));
  if (g.dtype() == DType::bf16 || g.dtype() == DType::f16) {
    // As the GPU's kernel: widened to f32, times float(coef), rounded once (ZeRO's bf16 master
    // weights in bf16 clip their bf16 gradients).
    Tensor wide = g.to(DType::f32).contiguous();
    float* x = wide.data<float>();
    const float c = static_cast<float>(coef);
    const int64_t n = wide.numel();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] *= c;
    g.copyFrom(wide);
    return;
  }
  if (g.isDense()) {
    // Dense: every element is in one block from dataPtr(), whatever the dimension order.
    const int64_t n = g.numel();
    visitDType(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T* x = g.data<T>();
        const T c = static_cast<T>(coef);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) x[i] *= c;
      }
    });
  } else {
    Tensor scaled = g.to(DType::f64).contiguous();
    double* x = scaled.data<double>();
    for (int64_t i = 0; i < scaled.numel(); ++i) x[i] *= coef;
    g.copyFrom(scaled);
  }
}

Tensor totalNorm(const std::vector<Tensor>& xs, double p) {
  std::vector<double> norms;
  norms.reserve(xs.size());
  for (const Tensor& x : xs) norms.push_back(normOnHost(x, p));
  return Tensor::scalar(combineNorms(norms, p), DType::f64);
}

void scaleByClipCoefficient(const std::vector<Tensor>& xs, const Tensor& total, double max_norm) {
  const double coef = clipCoefficient(total.item<double>(), max_norm);
  if (coef == 1.0) return;  // multiplying by 1 changes nothing
  for (const Tensor& x : xs) scaleOnHost(x, coef);
}

}  // namespace

const NormKernels kNorm{
    .norm = &normOnHost, .totalNorm = &totalNorm, .scaleByClipCoefficient = &scaleByClipCoefficient};

}  // namespace lockstep::kernels::cpu
