#include "lockstep/kernels/batch_norm.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/batch_norm.h"

namespace lockstep::kernels {

namespace {
const Backends<BatchNormKernels> kBackends{.onednn = &onednn::kBatchNorm,
                                           .cpu = &cpu::kBatchNorm,
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

// The affine parameters come in x's dtype, or in f32 beside a bf16/f16 x (PyTorch's mixed batch
// norm under autocast: f32 parameters and statistics, activations in 16 bits).
void checkParamDType(const Tensor& v, const Tensor& x, const char* what) {
  if (!v.defined()) return;
  const bool low = x.dtype() == DType::bf16 || x.dtype() == DType::f16;
  LOCKSTEP_ENFORCE(v.dtype() == x.dtype() || (low && v.dtype() == DType::f32), ValueError,
                   "batch_norm2d: ", what, " ", v.describe(), " and input ", x.describe(),
                   " differ in dtype (the ", what,
                   " takes the input's dtype, or f32 beside a bf16/f16 input)");
}

bool mixed(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Tensor& p = weight.defined() ? weight : bias;
  return p.defined() && p.dtype() != x.dtype();
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
                                   Tensor running_mean, Tensor running_var, const BatchNormParams& p,
                                   const Tensor& residual) {
  LOCKSTEP_ENFORCE(x.dim() == 4, ValueError, "batch_norm2d: input ", shapeToString(x.shape()),
                   " must be 4-d [N, C, H, W]");
  checkVector(weight, x, "weight");
  checkVector(bias, x, "bias");
  checkVector(running_mean, x, "running_mean");
  checkVector(running_var, x, "running_var");
  checkParamDType(weight, x, "weight");
  checkParamDType(bias, x, "bias");
  LOCKSTEP_ENFORCE(!weight.defined() || !bias.defined() || weight.dtype() == bias.dtype(), ValueError,
                   "batch_norm2d: weight ", weight.describe(), " and bias ", bias.describe(),
                   " differ in dtype");
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
  if (residual.defined()) {
    LOCKSTEP_ENFORCE(
        residual.shape() == x.shape() && residual.dtype() == x.dtype() && residual.device() == x.device(),
        ValueError, "batch_norm2d: residual ", residual.describe(),
        " must have the input's shape, dtype and device (", x.describe(), ")");
  }
  if (mixed(x, weight, bias) && !x.isCuda()) {
    // The CPU kernels take one dtype: normalise the widened x, round y once.
    BatchNormResult r = batchNorm2dForward(x.to(DType::f32), weight, bias, running_mean, running_var, p,
                                           residual.defined() ? residual.to(DType::f32) : residual);
    r.y = r.y.to(x.dtype());
    return r;
  }
  BatchNormResult r = dispatch<&BatchNormKernels::batchNorm2dForward>(kBackends, x, x, weight, bias,
                                                                      running_mean, running_var, residual, p);
  // The GPU kernels update the running statistics on the device themselves.
  if (p.training && running_mean.defined() && !x.isCuda()) {
    blend(running_mean, r.mean, p.momentum, 1.0);
    blend(running_var, r.var, p.momentum, double(count) / double(count - 1));  // unbiased, as PyTorch
  }
  return r;
}

BatchNormGrads batchNorm2dBackward(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias,
                                   const Tensor& mean, const Tensor& var, const BatchNormParams& p,
                                   const Tensor& y, bool with_residual) {
  LOCKSTEP_ENFORCE(gy.shape() == x.shape(), ValueError, "batch_norm2d backward: gradient ",
                   shapeToString(gy.shape()), " differs from the input shape ", shapeToString(x.shape()));
  LOCKSTEP_ENFORCE(!p.relu || (y.defined() && y.shape() == x.shape()), ValueError,
                   "batch_norm2d backward: a fused relu needs the forward's output ", x.describe(), ", got ",
                   y.defined() ? y.describe() : std::string("none"));
  LOCKSTEP_ENFORCE(!p.relu || y.dtype() == x.dtype(), ValueError,
                   "batch_norm2d backward: the forward's output ", y.describe(), " and input ", x.describe(),
                   " differ in dtype");
  if (mixed(x, weight, Tensor()) && !x.isCuda()) {
    BatchNormGrads g = batchNorm2dBackward(gy.to(DType::f32), x.to(DType::f32), weight, with_bias, mean, var,
                                           p, p.relu ? y.to(DType::f32) : y, with_residual);
    g.x = g.x.to(x.dtype());
    if (g.residual.defined()) g.residual = g.residual.to(x.dtype());
    return g;
  }
  return dispatch<&BatchNormKernels::batchNorm2dBackward>(kBackends, x, gy, x, weight, with_bias, mean, var,
                                                          p.relu ? y : Tensor(), with_residual, p);
}

}  // namespace lockstep::kernels
