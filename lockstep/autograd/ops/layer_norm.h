#pragma once
// Layer normalisation.
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// Normalises over the trailing dims of normalized_shape; weight/bias of that shape or undefined.
Variable layerNorm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                   const Variable& bias, double eps = 1e-5);
/// autocast::lower(layerNorm(...)) in one op, for a LayerNorm whose only reader runs in the lower
/// precision (a transformer's LayerNorm before its linear layer): under autocast the f32
/// normalisation is rounded once to the autocast dtype, the value that reader's own cast would give,
/// without a cast's pass of its own, and the gradient is read in that dtype as it comes. Outside
/// autocast it is layerNorm. Not for a result with several readers: their gradients would add in
/// the lower precision, where each reader's own cast would have added them in f32.
Variable layerNormLowered(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                          const Variable& bias, double eps = 1e-5);

}  // namespace lockstep::autograd
