#pragma once
// Which implementation computes an op: oneDNN for f32/bf16/f16 (the fast path), the reference loops
// for f64 (oneDNN has no f64; the gradient tests run in f64) or when LOCKSTEP_KERNELS=reference.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

enum class Backend { onednn, reference };

/// The backend for an op whose main operand has dtype t.
Backend backendFor(DType t);

}  // namespace lockstep::kernels
