#include "lockstep/kernels/batch_norm.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/batch_norm.h"

namespace lockstep::kernels {

namespace {
const Backends<BatchNormKernels> kBackends{.onednn = &onednn::kBatchNorm,
                                           .reference = &reference::kBatchNorm,
                                           .cuda = LOCKSTEP_CUDA_TABLE(cuda::kBatchNorm)};
}  // namespace

namespace {
void checkVector(const Tensor& v, const Tensor& x, const char* what) {
  if (!v.defined()) return;
  LOCKSTEP_ENFORCE(v.shape() == Shape{x.size(1)} && isFloating(v.dtype()), ValueError, "batch_norm2d: ", what,
                   " ", v.describe(), " does not match input ", x.describe(), " (expected [", x.size(1),
                   "])");
}

// running = (1 - momentum) * running + momentum * scale * stat, in place, in running's dtype.
void blend(Tensor& running, const Tensor& stat, double momentum, double scale) {
  auto r = running.toVector<double>();
  auto s = stat.toVector<double>();
  for (size_t i = 0; i < r.size(); ++i) r[i] = (1 - momentum) * r[i] + momentum * scale * s[i];
  running.copyFrom(Tensor::fromVector<double>(r, running.shape()));
}
}  // namespace

BatchNormResult batchNorm2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   Tensor running_mean, Tensor running_var, const BatchNormParams& p) {
  LOCKSTEP_ENFORCE(x.dim() == 4, ValueError, "batch_norm2d: input ", shapeToString(x.shape()),
                   " must be 4-d [N, C, H, W]");
  checkVector(weight, x, "weight");
  checkVector(bias, x, "bias");
  checkVector(running_mean, x, "running_mean");
  checkVector(running_var, x, "running_var");
  LOCKSTEP_ENFORCE(!weight.defined() || weight.dtype() == x.dtype(), ValueError, "batch_norm2d: weight ",
                   weight.describe(), " and input ", x.describe(), " differ in dtype");
  LOCKSTEP_ENFORCE(!bias.defined() || bias.dtype() == x.dtype(), ValueError, "batch_norm2d: bias ",
                   bias.describe(), " and input ", x.describe(), " differ in dtype");
  LOCKSTEP_ENFORCE(running_mean.defined() == running_var.defined(), ValueError,
                   "batch_norm2d: running_mean and running_var must both be given or both be undefined");
  const int64_t count = x.size(0) * x.size(2) * x.size(3);
  if (p.training) {
    LOCKSTEP_ENFORCE(count > 1, ValueError,
                     "batch_norm2d: training needs more than one value per channel, got input ",
                     shapeToString(x.shape()));
  } else {
    LOCKSTEP_ENFORCE(running_mean.defined(), ValueError,
                     "batch_norm2d: eval mode needs running_mean and running_var (input ",
                     shapeToString(x.shape()), ")");
  }
  BatchNormResult r = dispatch<&BatchNormKernels::batchNorm2dForward>(kBackends, x, x, weight, bias,
                                                                      running_mean, running_var, p);
  // The GPU kernels update the running statistics on the device themselves.
  if (p.training && running_mean.defined() && !x.isCuda()) {
    blend(running_mean, r.mean, p.momentum, 1.0);
    blend(running_var, r.var, p.momentum, double(count) / double(count - 1));  // unbiased, as PyTorch
  }
  return r;
}

BatchNormGrads batchNorm2dBackward(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias,
                                   const Tensor& mean, const Tensor& var, const BatchNormParams& p) {
  LOCKSTEP_ENFORCE(gy.shape() == x.shape(), ValueError, "batch_norm2d backward: gradient ",
                   shapeToString(gy.shape()), " differs from the input shape ", shapeToString(x.shape()));
  return dispatch<&BatchNormKernels::batchNorm2dBackward>(kBackends, x, gy, x, weight, with_bias, mean, var,
                                                          p);
}

}  // namespace lockstep::kernels
