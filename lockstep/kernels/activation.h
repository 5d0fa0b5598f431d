#pragma once
// Element-wise activations. Forward returns a new tensor in x's layout; backward returns dL/dx.
// Each backward takes what its derivative is cheapest from: the output y for relu/tanh/sigmoid,
// the input x for leaky relu and gelu.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

Tensor reluForward(const Tensor& x);
/// dL/dx from dL/dy and the forward's output y (y > 0 where x > 0).
Tensor reluBackward(const Tensor& gy, const Tensor& y);

/// x if x > 0 else negative_slope * x.
Tensor leakyReluForward(const Tensor& x, double negative_slope);
Tensor leakyReluBackward(const Tensor& gy, const Tensor& x, double negative_slope);
/// Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
Tensor geluForward(const Tensor& x);
Tensor geluBackward(const Tensor& gy, const Tensor& x);
/// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor geluTanhForward(const Tensor& x);
Tensor geluTanhBackward(const Tensor& gy, const Tensor& x);
/// SiLU (swish): x sigmoid(x); backward from the input.
Tensor siluForward(const Tensor& x);
Tensor siluBackward(const Tensor& gy, const Tensor& x);
Tensor tanhForward(const Tensor& x);
/// From the output y: dL/dx = gy (1 - y^2).
Tensor tanhBackward(const Tensor& gy, const Tensor& y);
Tensor sigmoidForward(const Tensor& x);
/// From the output y: dL/dx = gy y (1 - y).
Tensor sigmoidBackward(const Tensor& gy, const Tensor& y);

}  // namespace lockstep::kernels
