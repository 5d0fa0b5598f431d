#pragma once
// Rotary position embeddings (RoPE): the op and its cos/sin tables.
#include <cstdint>
#include <utility>

#include "lockstep/autograd/variable.h"
#include "lockstep/kernels/transformer.h"

namespace lockstep::autograd {

/// Rotary position embedding, HF-Llama "rotate_half" convention: x [B, H, T, D] (D even),
/// cos/sin [T, D/2] (plain tensors, no gradient, any floating dtype):
///   out[..., :D/2] = x1 cos - x2 sin, out[..., D/2:] = x2 cos + x1 sin,
/// with x1 = x[..., :D/2], x2 = x[..., D/2:]. Result contiguous, x's dtype. cos and sin must be on
/// x's device (ValueError otherwise).
Variable applyRotary(const Variable& x, const Tensor& cos, const Tensor& sin);
/// cos, sin [T, D/2] for applyRotary (kernels/transformer.h).
using kernels::rotaryTables;

}  // namespace lockstep::autograd
