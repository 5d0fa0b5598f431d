#pragma once
// lockstep's CUDA softmax and log-softmax along one dim (built with LOCKSTEP_CUDA only;
// kernels/softmax.cpp routes GPU tensors here with dim already normalised). Rows compute in f32
// (f64 for f64) and round on store; outputs keep x's dense layout. Queued on the device's current
// stream without host synchronisation.
#include <cstdint>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// softmax (log = false) or log-softmax (log = true) of x along dim (0 <= dim < x.dim()).
Tensor softmaxForward(const Tensor& x, int64_t dim, bool log);
/// dL/dx from dL/dy and the forward's output y.
Tensor softmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim, bool log);

}  // namespace lockstep::kernels::cuda
