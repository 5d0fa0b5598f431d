#pragma once
// Copies, casts and fills of tensors on one GPU, queued on the device's current stream (the device
// side of Tensor::copyFrom and Tensor::fill; tensor/device_copy.cpp calls them).
#include "lockstep/tensor/tensor.h"

namespace lockstep::cuda {

/// dst = src element-wise with cast, both on the same GPU, any strides (same shapes).
void copyStrided(const Tensor& dst, const Tensor& src);
/// Every element of dst = value cast to its dtype.
void fill(const Tensor& dst, double value);

}  // namespace lockstep::cuda
