#pragma once
// In-place scaling of a dense floating tensor: the averaging step of DDP's communication hooks and
// of gradient accumulation.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// x *= factor in place. f32 and f64 multiply in their own type; bf16 and f16 in f32, rounded once.
/// x must be dense (ValueError otherwise).
void scaleInPlace(Tensor& x, double factor);
/// x *= factor, a 0-d floating tensor on x's device (read there: no host synchronisation on a
/// GPU), with factor's value cast to the compute type (f32, or f64 for f64 x) as the double
/// overload's is. x dense (ValueError otherwise).
void scaleInPlace(Tensor& x, const Tensor& factor);

}  // namespace lockstep::kernels
