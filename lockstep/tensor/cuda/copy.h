#pragma once
// Copies, casts and fills of tensors on one GPU, queued on the device's current stream (the device
// side of Tensor::copyFrom and Tensor::fill; tensor/device_copy.cpp calls them).
#include <span>

#include "lockstep/tensor/tensor.h"

namespace lockstep::cuda {

/// dst = src element-wise with cast, both on the same GPU, any strides (same shapes).
void copyStrided(const Tensor& dst, const Tensor& src);
/// Whether copyMany takes the pair: both contiguous on one GPU, floating dtypes (f32, f64, bf16, f16).
bool copyManyTakes(const Tensor& dst, const Tensor& src);
/// dst[i] = src[i] with cast for every pair (copyManyTakes each, all on one GPU, equal sizes, no
/// pair overlapping another): one multi-tensor launch per dtype pair present, not one per pair.
void copyMany(std::span<const Tensor> dst, std::span<const Tensor> src);
/// Every element of dst = value cast to its dtype.
void fill(const Tensor& dst, double value);

}  // namespace lockstep::cuda
