#pragma once
// Per-channel kernels over [N, C, H, W] GPU activations in their own layout (built with
// LOCKSTEP_CUDA only): the convolution's bias (and fused relu) and its gradient. Queued on the
// current stream; sums in f64.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// y[n, c, h, w] = y + bias[c] (bias may be undefined), then max(., 0) when relu; in place.
void addChannelBias(const Tensor& y, const Tensor& bias, bool relu);
/// [C] in g's dtype: the sum of g over N, H and W for each channel (a convolution's bias gradient).
Tensor sumPerChannel(const Tensor& g);

}  // namespace lockstep::kernels::cuda
