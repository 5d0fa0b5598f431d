#pragma once
// lockstep's CUDA reductions (built with LOCKSTEP_CUDA only; kernels/reduce.cpp routes GPU tensors
// here, and sumToShape reaches them through reduce). Floating inputs accumulate in f32 (f64 for
// f64) and round on store; integers accumulate in i64. Queued on the device's current stream
// without host synchronisation.
#include <vector>

#include "lockstep/kernels/reduce.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// As kernels::reduce: sum or mean of x over dims, contiguous result of x's dtype on x's device.
Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace lockstep::kernels::cuda
