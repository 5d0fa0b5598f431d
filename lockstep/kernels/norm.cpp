#include "lockstep/kernels/norm.h"

#include <algorithm>
#include <cmath>

#include "lockstep/kernels/cuda/norm.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

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
  LOCKSTEP_ENFORCE(g.dtype() == DType::f32 || g.dtype() == DType::f64, NotSupportedError,
                   "clipGradNorm supports f32 and f64 gradients, got ", dtypeName(g.dtype()));
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

void checkNormType(double p, const char* op) {
  LOCKSTEP_ENFORCE(p > 0.0, ValueError, op, ": the norm type must be positive, got ", p);
}

}  // namespace

double norm(const Tensor& x, double p) {
  checkNormType(p, "norm");
  LOCKSTEP_ON_CUDA(x, cuda::totalNorm({x}, p).item<double>());
  return normOnHost(x, p);
}

double combineNorms(const std::vector<double>& norms, double p) {
  if (norms.empty()) return 0.0;
  if (std::isinf(p)) return *std::max_element(norms.begin(), norms.end());
  double s = 0.0;
  for (double v : norms) s += std::pow(v, p);
  return std::pow(s, 1.0 / p);
}

Tensor totalNorm(const std::vector<Tensor>& xs, double p) {
  checkNormType(p, "totalNorm");
  LOCKSTEP_ENFORCE(!xs.empty(), ValueError, "totalNorm: no tensors given");
  for (const Tensor& x : xs) {
    LOCKSTEP_ENFORCE(x.device() == xs[0].device(), ValueError, "totalNorm: tensors on different devices, ",
                     xs[0].describe(), " and ", x.describe(), "; move them to one device first");
  }
  LOCKSTEP_ON_CUDA(xs[0], cuda::totalNorm(xs, p));
  std::vector<double> norms;
  norms.reserve(xs.size());
  for (const Tensor& x : xs) norms.push_back(normOnHost(x, p));
  return Tensor::scalar(combineNorms(norms, p), DType::f64);
}

void scaleByClipCoefficient(const std::vector<Tensor>& xs, const Tensor& total, double max_norm) {
  LOCKSTEP_ENFORCE(total.numel() == 1 && total.dtype() == DType::f64, ValueError,
                   "scaleByClipCoefficient: the total norm must be one f64 element, got ", total.describe());
  if (xs.empty()) return;
  for (const Tensor& x : xs) {
    LOCKSTEP_ENFORCE(x.device() == total.device(), ValueError, "scaleByClipCoefficient: ", x.describe(),
                     " is not on the total norm's device (", total.describe(), ")");
  }
  LOCKSTEP_ON_CUDA(total, cuda::scaleByClipCoefficient(xs, total, max_norm));
  const double coef = clipCoefficient(total.item<double>(), max_norm);
  if (coef == 1.0) return;  // multiplying by 1 changes nothing
  for (const Tensor& x : xs) scaleOnHost(x, coef);
}

}  // namespace lockstep::kernels
