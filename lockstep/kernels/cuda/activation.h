#pragma once
// lockstep's CUDA kernels for the element-wise activations of kernels/activation.h (built with
// LOCKSTEP_CUDA only; activation.cpp routes GPU tensors here). Same formulas, layouts and errors as
// the CPU; floating dtypes compute in f32 (f64 for f64) and round on store; queued on the device's
// current stream without host synchronisation.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

enum class Activation { relu, leaky_relu, gelu, gelu_tanh, silu, tanh, sigmoid };

/// act(x); slope is leaky relu's negative slope (ignored otherwise).
Tensor activationForward(Activation act, const Tensor& x, double slope = 0.0);
/// dL/dx from dL/dy and what the CPU backward takes: the output y for relu, tanh and sigmoid, the
/// input x for the others.
Tensor activationBackward(Activation act, const Tensor& gy, const Tensor& saved, double slope = 0.0);

}  // namespace lockstep::kernels::cuda
