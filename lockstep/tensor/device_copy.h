#pragma once
// Copies that involve a GPU (host <-> device, device <-> device, any layouts and dtypes), and fills
// on a GPU: the device side of Tensor::copyFrom and Tensor::fill. Internal to tensor/.
#include "lockstep/tensor/tensor.h"

namespace lockstep::detail {

/// dst.copyFrom(src) where either side is on a GPU (same shapes, checked by the caller).
void copyWithDevices(const Tensor& dst, const Tensor& src, bool non_blocking);
/// Whether copyManyOnDevice takes the pair (both contiguous floating tensors on one GPU); false
/// without CUDA.
bool copyManyTakes(const Tensor& dst, const Tensor& src);
/// Tensor::copyMany's batched pairs (each taken by copyManyTakes, all on one GPU).
void copyManyOnDevice(std::span<const Tensor> dst, std::span<const Tensor> src);
/// dst.fill(value) for a tensor on a GPU.
void fillOnDevice(const Tensor& dst, double value);

}  // namespace lockstep::detail
