#pragma once
// 2-d batch normalisation over [N, C, H, W] (per channel C). y keeps x's layout (channels_last when
// x is). Training normalises with the batch statistics and updates the running ones in place the
// way PyTorch does (momentum, unbiased variance); eval normalises with the running statistics.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

struct BatchNormParams {
  bool training = true;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch statistic
  double eps = 1e-5;
  /// y = relu(normalised x + residual): a ResNet block's tail in the normalisation's passes.
  bool relu = false;
};

struct BatchNormResult {
  Tensor y;
  /// The statistics y was normalised with ([C]; f32 from lockstep's CPU kernels and oneDNN, f64 from
  /// the reference): the batch mean and biased variance when training, copies of the running ones
  /// otherwise.
  Tensor mean, var;
};
/// Rounds the floating results of an f32 kernel back to `low` (the dispatcher's emulation of bf16/f16).
inline void narrowResults(BatchNormResult& r, DType low) {
  if (r.y.defined()) r.y = r.y.to(low);
}

struct BatchNormGrads {
  Tensor x, weight, bias;  // weight/bias undefined when the forward had none
  Tensor residual;         // dL/dresidual, when asked for (the relu's masked dL/dy)
};
/// Rounds the floating results of an f32 kernel back to `low` (the dispatcher's emulation of bf16/f16).
inline void narrowResults(BatchNormGrads& r, DType low) {
  if (r.x.defined()) r.x = r.x.to(low);
  if (r.weight.defined()) r.weight = r.weight.to(low);
  if (r.bias.defined()) r.bias = r.bias.to(low);
  if (r.residual.defined()) r.residual = r.residual.to(low);
}

/// weight/bias [C] or undefined (no affine transform), in x's dtype or f32 beside a bf16/f16 x (as
/// PyTorch's batch norm under autocast: y in x's dtype, the parameters' gradients in theirs).
/// running_mean/var [C] are updated in place when training (they may then be undefined) and required
/// otherwise. ValueError naming the shapes for a mismatch, or when training sees a single value per channel.
/// residual (optional, x's shape and dtype) is added to the normalised x, before p.relu.
BatchNormResult batchNorm2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   Tensor running_mean, Tensor running_var, const BatchNormParams& p,
                                   const Tensor& residual = Tensor());
/// dL/dx, dL/dweight, dL/dbias from dL/dy and the forward's x, weight and statistics; bias tells
/// whether the forward had a bias. With p.relu, y is the forward's output (its sign masks dL/dy);
/// with_residual also returns dL/dresidual.
BatchNormGrads batchNorm2dBackward(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias,
                                   const Tensor& mean, const Tensor& var, const BatchNormParams& p,
                                   const Tensor& y = Tensor(), bool with_residual = false);

}  // namespace lockstep::kernels
