#pragma once
// Element-wise activations: relu, leaky relu, GELU (exact and tanh), tanh, sigmoid, SiLU and SwiGLU.
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// max(x, 0).
Variable relu(const Variable& x);
Variable leakyRelu(const Variable& x, double negative_slope = 0.01);
/// Exact (erf) GELU, as torch.nn.functional.gelu's default.
Variable gelu(const Variable& x);
enum class GeluApproximation { none, tanh };
/// GELU with torch's `approximate` ("none" = erf, as gelu(x); "tanh" = GPT-2's tanh form).
Variable gelu(const Variable& x, GeluApproximation approximate);
Variable tanh(const Variable& x);
Variable sigmoid(const Variable& x);
/// x * sigmoid(x) (torch.nn.functional.silu).
Variable silu(const Variable& x);
/// silu(gate) * up in one pass; the backward node keeps only (gate, up). Same shapes.
Variable swiglu(const Variable& gate, const Variable& up);

}  // namespace lockstep::autograd
