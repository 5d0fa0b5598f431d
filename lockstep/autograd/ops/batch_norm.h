#pragma once
// 2-d batch normalisation (NCHW logical shape; the input's memory format is kept).
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

struct BatchNormOptions {
  bool training = true;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch (unbiased var)
  double eps = 1e-5;
};
/// x [N, C, H, W]; weight/bias [C] or undefined (affine off). running_mean/var [C] tensors are
/// updated in place when training and used when not; they may be undefined when training.
Variable batchNorm2d(const Variable& x, const Variable& weight, const Variable& bias, Tensor running_mean,
                     Tensor running_var, const BatchNormOptions& opts);
/// relu(batchNorm2d(x) + residual), residual optional (then relu(batchNorm2d(x))): a ResNet block's
/// tail, which lockstep's kernels (the GPU's, the CPU's f32 ones) run in the normalisation's passes,
/// forward and backward; the same values and gradients as the ops composed.
Variable batchNorm2dRelu(const Variable& x, const Variable& weight, const Variable& bias, Tensor running_mean,
                         Tensor running_var, const BatchNormOptions& opts,
                         const Variable& residual = Variable());

}  // namespace lockstep::autograd
