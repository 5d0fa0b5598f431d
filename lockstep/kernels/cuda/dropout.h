#pragma once
// lockstep's CUDA dropout (built with LOCKSTEP_CUDA only; kernels/dropout.cpp routes GPU tensors
// here and advances the generator). The mask is the host's: element i (row-major) keeps when the
// Philox draw at counter base + i under key is below dropoutThreshold(1 - p) (kernels/dropout.h).
// Inside a CUDA graph capture, key and base come from device memory (kernels::PhiloxState).
#include <cstdint>
#include <utility>

#include "lockstep/kernels/dropout.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// {y = x * mask / (1 - p) (contiguous, x's dtype; bf16/f16 scaled in f32), mask (u8, contiguous)};
/// the draws start where `philox` says (its device state is read by the kernel).
std::pair<Tensor, Tensor> dropoutForward(const Tensor& x, double p, const PhiloxState& philox);
/// dL/dx = gy * mask / (1 - p), contiguous.
Tensor dropoutBackward(const Tensor& gy, const Tensor& mask, double p);

}  // namespace lockstep::kernels::cuda
