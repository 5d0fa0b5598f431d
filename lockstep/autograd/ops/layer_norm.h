#pragma once
// Layer normalisation.
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// Normalises over the trailing dims of normalized_shape; weight/bias of that shape or undefined.
Variable layerNorm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                   const Variable& bias, double eps = 1e-5);

}  // namespace lockstep::autograd
