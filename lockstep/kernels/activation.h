#pragma once
// Element-wise activations. Forward returns a new tensor in x's layout; backward returns dL/dx.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

Tensor reluForward(const Tensor& x);
/// dL/dx from dL/dy and the forward's output y (y > 0 where x > 0).
Tensor reluBackward(const Tensor& gy, const Tensor& y);

namespace onednn {
Tensor reluForward(const Tensor& x);
Tensor reluBackward(const Tensor& gy, const Tensor& y);
}  // namespace onednn

namespace reference {
Tensor reluForward(const Tensor& x);
Tensor reluBackward(const Tensor& gy, const Tensor& y);
}  // namespace reference

}  // namespace lockstep::kernels
