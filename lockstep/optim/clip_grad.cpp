#include "lockstep/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "lockstep/util/error.h"

namespace lockstep::optim {

double tensorNorm(const Tensor& g, double p) {
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

double gradNorm(const std::vector<autograd::Variable>& params, double norm_type) {
  LOCKSTEP_ENFORCE(norm_type > 0.0, ValueError, "gradNorm: norm_type must be positive, got ", norm_type);
  std::vector<double> norms;
  for (const auto& p : params) {
    if (p.hasGrad()) norms.push_back(tensorNorm(p.grad(), norm_type));
  }
  return combineNorms(norms, norm_type);
}

double combineNorms(const std::vector<double>& norms, double norm_type) {
  if (norms.empty()) return 0.0;
  if (std::isinf(norm_type)) return *std::max_element(norms.begin(), norms.end());
  double s = 0.0;
  for (double v : norms) s += std::pow(v, norm_type);
  return std::pow(s, 1.0 / norm_type);
}

double clipGradNorm(const std::vector<autograd::Variable>& params, double max_norm,
                    const ClipGradNormOptions& options) {
  const double total = gradNorm(params, options.norm_type);
  LOCKSTEP_ENFORCE(!options.error_if_nonfinite || std::isfinite(total), ValueError,
                   "clipGradNorm: the total norm ", total,
                   " of the gradients is not finite; set error_if_nonfinite=false to clip anyway");
  const double raw = max_norm / (total + 1e-6);
  const double coef = std::isnan(raw) ? raw : std::min(1.0, raw);  // NaN propagates, as in PyTorch
  if (coef == 1.0) return total;                                   // multiplying by 1 changes nothing
  for (const auto& p : params) {
    if (!p.hasGrad()) continue;
    Tensor g = p.grad();
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
  return total;
}

}  // namespace lockstep::optim
