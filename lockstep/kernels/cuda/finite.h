#pragma once
// lockstep's CUDA non-finite checks for loss scaling (built with LOCKSTEP_CUDA only;
// kernels/finite.cpp routes GPU tensors here). The result stays on the device, as torch's
// _amp_foreach_non_finite_check_and_unscale_ keeps found_inf there.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// x *= factor in place (scale = false: x untouched), then found_inf[0] = 1 where any element of x
/// is inf or nan (found_inf is never reset to 0: one flag serves many tensors). found_inf: one f32
/// element on x's device. Floating x (bf16/f16 scaled in f32 and rounded), any strides.
void checkNonFiniteInto(Tensor& x, double factor, bool scale, Tensor& found_inf);

}  // namespace lockstep::kernels::cuda
