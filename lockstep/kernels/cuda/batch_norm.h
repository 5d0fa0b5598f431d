#pragma once
// 2-d batch normalisation on a GPU: lockstep's own kernels (built with LOCKSTEP_CUDA only;
// kernels/batch_norm.cpp routes GPU tensors here) with the CPU's semantics: biased batch variance
// for normalising, running statistics updated in place as PyTorch does ((1 - momentum) * running +
// momentum * stat, the variance unbiased by count / (count - 1)), eval normalising with the running
// statistics. Per-channel sums in f64; y and dL/dx keep x's layout. A residual add and a relu after
// the normalisation run in its pass (and their gradients in the backward's). Queued on the current stream;
// nothing is read back to the host.
#include "lockstep/kernels/batch_norm.h"

namespace lockstep::kernels::cuda {

/// The result's mean/var are f32 (f64 for f64 inputs) on the GPU. Updates the running statistics
/// (when training and given) itself.
BatchNormResult batchNorm2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const Tensor& residual, const BatchNormParams& p);
BatchNormGrads batchNorm2dBackward(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias,
                                   const Tensor& mean, const Tensor& var, const Tensor& y, bool with_residual,
                                   const BatchNormParams& p);

}  // namespace lockstep::kernels::cuda
