#pragma once
// softmax and log-softmax along one dim (negative allowed). Outputs keep x's dense layout.
#include <cstdint>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

Tensor softmaxForward(const Tensor& x, int64_t dim);
/// dL/dx = y * (gy - sum(gy * y, dim)), from the forward's output y.
Tensor softmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim);
Tensor logSoftmaxForward(const Tensor& x, int64_t dim);
/// dL/dx = gy - exp(y) * sum(gy, dim), from the forward's output y.
Tensor logSoftmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim);

}  // namespace lockstep::kernels
