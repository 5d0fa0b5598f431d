#pragma once
// concat on a GPU (built with LOCKSTEP_CUDA only; kernels/shape.cpp routes here after checkConcat).
#include <cstdint>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// xs joined along dim d (normalised) into a contiguous tensor of shape out on xs[0]'s GPU; every
/// input must be there (ValueError naming both devices otherwise). One device copy per input.
Tensor concat(const std::vector<Tensor>& xs, int64_t d, const Shape& out);

}  // namespace lockstep::kernels::cuda
