#pragma once
// The gradient checks of loss scaling: is any element inf or nan, and unscale-and-check in one
// pass (torch's _amp_foreach_non_finite_check_and_unscale_).
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// Whether any element of x is inf or nan. Floating x (NotSupportedError naming the dtype
/// otherwise), any strides; false for an empty tensor.
bool hasNonFinite(const Tensor& x);

/// x *= factor in place, then whether any element of the result is inf or nan: one pass over x.
/// An inf or nan in x stays one for any finite factor > 0, and a finite element that the factor
/// carries past the dtype's range counts too. Floating x (the factor is cast to x's dtype; bf16 and
/// f16 are scaled in f32 and rounded once, the rounded value checked), any strides.
bool scaleAndCheckNonFinite(Tensor& x, double factor);

/// On a GPU hasNonFinite and scaleAndCheckNonFinite run on the device but read their answer back
/// (a host sync). This form reads nothing back (CUDA-graph safe): x *= factor, and found_inf (one
/// f32 element on x's device) is set to 1 when any element of the result is inf or nan. It is never
/// reset to 0, so one flag collects a whole set of gradients (torch's
/// _amp_foreach_non_finite_check_and_unscale_).
void scaleAndCheckNonFiniteInto(Tensor& x, double factor, Tensor& found_inf);

}  // namespace lockstep::kernels
