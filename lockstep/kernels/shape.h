#pragma once
// Shape kernels that move data: concat. (Pure views such as reshape/permute/narrow live on Tensor.)
#include <cstdint>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// Joins tensors along dim (negative allowed). All must have the same dtype and rank and equal
/// sizes in every other dim (ValueError naming both shapes otherwise). The result is contiguous.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);

/// Validates concat's inputs; returns the result shape and sets *d to the normalised dim.
Shape checkConcat(const std::vector<Tensor>& xs, int64_t dim, int64_t* d);

}  // namespace lockstep::kernels
