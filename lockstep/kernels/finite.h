#pragma once
// The gradient checks of loss scaling: is any element inf or nan, and unscale-and-check in one
// pass (torch's _amp_foreach_non_finite_check_and_unscale_).
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// Whether any element of x is inf or nan. f32 and f64 (NotSupportedError naming the dtype
/// otherwise), any strides; false for an empty tensor.
bool hasNonFinite(const Tensor& x);

/// x *= factor in place, then whether any element of the result is inf or nan: one pass over x.
/// An inf or nan in x stays one for any finite factor > 0, and a finite element that the factor
/// carries past the dtype's range counts too. f32 and f64 (the factor is cast to x's dtype), any
/// strides.
bool scaleAndCheckNonFinite(Tensor& x, double factor);

}  // namespace lockstep::kernels
