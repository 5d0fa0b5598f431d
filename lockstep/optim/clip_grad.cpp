#include "lockstep/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "lockstep/kernels/norm.h"
#include "lockstep/util/error.h"

namespace lockstep::optim {

namespace {
std::vector<Tensor> gradients(const std::vector<autograd::Variable>& params) {
  std::vector<Tensor> grads;
  for (const auto& p : params) {
    if (p.hasGrad()) grads.push_back(p.grad());
  }
  return grads;
}

void checkNormType(double norm_type, const char* op) {
  LOCKSTEP_ENFORCE(norm_type > 0.0, ValueError, op, ": norm_type must be positive, got ", norm_type);
}
}  // namespace

double tensorNorm(const Tensor& g, double p) { return kernels::norm(g, p); }

double clipCoefficient(double total, double max_norm) {
  const double raw = max_norm / (total + 1e-6);
  return std::isnan(raw) ? raw : std::min(1.0, raw);
}

double combineNorms(const std::vector<double>& norms, double norm_type) {
  return kernels::combineNorms(norms, norm_type);
}

double gradNorm(const std::vector<autograd::Variable>& params, double norm_type) {
  checkNormType(norm_type, "gradNorm");
  const std::vector<Tensor> grads = gradients(params);
  return grads.empty() ? 0.0 : kernels::totalNorm(grads, norm_type).item<double>();
}

Tensor clipGradNormTensor(const std::vector<autograd::Variable>& params, double max_norm,
                          const ClipGradNormOptions& options) {
  checkNormType(options.norm_type, "clipGradNorm");
  const std::vector<Tensor> grads = gradients(params);
  if (grads.empty()) return Tensor::scalar(0.0, DType::f64);  // nothing to clip
  Tensor total = kernels::totalNorm(grads, options.norm_type);
  if (options.error_if_nonfinite) {
    const double t = total.item<double>();
    LOCKSTEP_ENFORCE(std::isfinite(t), ValueError, "clipGradNorm: the total norm ", t,
                     " of the gradients is not finite; set error_if_nonfinite=false to clip anyway");
  }
  kernels::scaleByClipCoefficient(grads, total, max_norm);
  return total;
}

double clipGradNorm(const std::vector<autograd::Variable>& params, double max_norm,
                    const ClipGradNormOptions& options) {
  return clipGradNormTensor(params, max_norm, options).item<double>();
}

}  // namespace lockstep::optim
