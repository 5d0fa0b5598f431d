#include "lockstep/kernels/norm.h"

#include <algorithm>
#include <cmath>

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/norm.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

namespace {

const Backends<NormKernels> kBackends{.cpu = &cpu::kNorm, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kNorm)};

void checkNormType(double p, const char* op) {
  LOCKSTEP_ENFORCE(p > 0.0, ValueError, op, ": the norm type must be positive, got ", p);
}

}  // namespace

double norm(const Tensor& x, double p) {
  checkNormType(p, "norm");
  return dispatchAsIs<&NormKernels::norm>(kBackends, x, x, p);
}

double combineNorms(const std::vector<double>& norms, double p) {
  if (norms.empty()) return 0.0;
  if (std::isinf(p)) {
    double m = norms[0];  // NaN once any is (max_element's order says nothing about NaN)
    for (double v : norms) m = m < v || v != v ? v : m;
    return m;
  }
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
  return dispatchAsIs<&NormKernels::totalNorm>(kBackends, xs[0], xs, p);
}

void scaleByClipCoefficient(const std::vector<Tensor>& xs, const Tensor& total, double max_norm) {
  LOCKSTEP_ENFORCE(total.numel() == 1 && total.dtype() == DType::f64, ValueError,
                   "scaleByClipCoefficient: the total norm must be one f64 element, got ", total.describe());
  if (xs.empty()) return;
  for (const Tensor& x : xs) {
    LOCKSTEP_ENFORCE(x.device() == total.device(), ValueError, "scaleByClipCoefficient: ", x.describe(),
                     " is not on the total norm's device (", total.describe(), ")");
  }
  dispatchAsIs<&NormKernels::scaleByClipCoefficient>(kBackends, total, xs, total, max_norm);
}

}  // namespace lockstep::kernels
