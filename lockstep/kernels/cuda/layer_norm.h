#pragma once
// lockstep's CUDA layer normalisation (built with LOCKSTEP_CUDA only; kernels/layer_norm.cpp routes
// GPU tensors here after its checks). Results as on the CPU: y in y_dtype (f32 x: also bf16 or f16,
// rounded once; other pairs through a cast), the gradients in x's dtype (gy read as it is when x is
// f32 and gy bf16/f16, else cast to x's dtype first), the
// mean and biased variance per row in f32 (f64 for f64 inputs). Rows compute in f32 (f64 for f64);
// the weight and bias gradients are column sums over the rows (kernels/cuda/reduce.h). Queued on
// the device's current stream without host synchronisation.
#include "lockstep/kernels/layer_norm.h"

namespace lockstep::kernels::cuda {

LayerNormOutput layerNormForward(const Tensor& x, int64_t n, const Tensor& weight, const Tensor& bias,
                                 double eps, DType y_dtype);
/// With gx_into (contiguous, x's shape and dtype): dL/dx added into it in the same pass, rounded to
/// x's dtype first as a separate add would see it; the result's gx is undefined then.
LayerNormGrads layerNormBackward(const Tensor& gy, const Tensor& x, const Tensor& mean,
                                 const Tensor& variance, int64_t n, const Tensor& weight, const Tensor& bias,
                                 double eps, Tensor* gx_into = nullptr);

}  // namespace lockstep::kernels::cuda
