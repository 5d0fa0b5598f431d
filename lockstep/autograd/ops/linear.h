#pragma once
// Dense layers: linear and matmul.
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// y = x W^T + b; x [..., in], weight [out, in], bias [out] or undefined.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);
/// Matrix product with numpy/torch.matmul semantics for 2-d and batched (>= 3-d, broadcast batch) inputs.
Variable matmul(const Variable& a, const Variable& b);

}  // namespace lockstep::autograd
