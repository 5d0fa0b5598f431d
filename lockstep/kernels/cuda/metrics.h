#pragma once
// lockstep's CUDA evaluation metrics (built with LOCKSTEP_CUDA only; kernels/metrics.cpp routes GPU
// tensors here after its checks). Queued on the logits' device's current stream; no host
// synchronisation.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// kernels::countCorrectInto on a GPU: a warp per row finds the prediction, each block adds its
/// rows' matches to correct with one integer atomic (exact, so the count does not depend on the
/// order blocks finish in).
void countCorrectInto(const Tensor& logits, const Tensor& target, Tensor& correct);

}  // namespace lockstep::kernels::cuda
