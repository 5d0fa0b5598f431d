#pragma once
// lockstep's CUDA norms and gradient clipping (built with LOCKSTEP_CUDA only; kernels/norm.cpp
// routes GPU tensors here after its checks). Queued on the tensors' device's current stream; no
// host synchronisation, so a clipped step can be captured in a CUDA graph.
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// kernels::totalNorm on a GPU: a 0-d f64 tensor on the xs' device. Deterministic: each block sums a
/// fixed chunk of one tensor, each tensor's chunks are summed in order by one block, and one block
/// combines the tensors' norms; no atomics.
Tensor totalNorm(const std::vector<Tensor>& xs, double p);

/// kernels::scaleByClipCoefficient on a GPU: every block computes the coefficient from total.
void scaleByClipCoefficient(const std::vector<Tensor>& xs, const Tensor& total, double max_norm);

}  // namespace lockstep::kernels::cuda
