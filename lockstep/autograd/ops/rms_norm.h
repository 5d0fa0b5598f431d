#pragma once
// RMS normalisation.
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * weight (torch.nn.functional.rms_norm);
/// weight [D] or undefined.
Variable rmsNorm(const Variable& x, const Variable& weight, double eps = 1e-6);
/// autocast::lower(rmsNorm(...)) in one op, for an RMSNorm whose one reader runs in the lower
/// precision (Llama's final norm before its head): as layerNormLowered. Outside autocast it is
/// rmsNorm.
Variable rmsNormLowered(const Variable& x, const Variable& weight, double eps = 1e-6);

}  // namespace lockstep::autograd
