#pragma once
// lockstep's CUDA layer normalisation (built with LOCKSTEP_CUDA only; kernels/layer_norm.cpp routes
// GPU tensors here after its checks). Results as on the CPU: y and the gradients in x's dtype, the
// mean and biased variance per row in f32 (f64 for f64 inputs). Rows compute in f32 (f64 for f64);
// the weight and bias gradients are column sums over the rows (kernels/cuda/reduce.h). Queued on
// the device's current stream without host synchronisation.
#include "lockstep/kernels/layer_norm.h"

namespace lockstep::kernels::cuda {

LayerNormOutput layerNormForward(const Tensor& x, int64_t n, const Tensor& weight, const Tensor& bias,
                                 double eps);
LayerNormGrads layerNormBackward(const Tensor& gy, const Tensor& x, const Tensor& mean,
                                 const Tensor& variance, int64_t n, const Tensor& weight, const Tensor& bias,
                                 double eps);

}  // namespace lockstep::kernels::cuda
