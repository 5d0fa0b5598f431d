#pragma once
// Element-wise math on one tensor: neg, exp, log, sqrt, pow. Forward returns a new tensor in x's
// layout (dense); backward returns dL/dx from dL/dy and what the forward saved.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

enum class UnaryOp { neg, exp, log, sqrt, pow };

/// "neg", "exp", ... (used in error messages).
const char* unaryOpName(UnaryOp op);
/// Whether backward needs the forward's output y (true) or its input x (false).
bool unaryBackwardUsesOutput(UnaryOp op);

/// op(x); p is the exponent of pow and ignored otherwise.
Tensor unary(UnaryOp op, const Tensor& x, double p = 0.0);
/// dL/dx given dL/dy and `saved`: y for exp and sqrt, x for neg, log and pow
/// (see unaryBackwardUsesOutput).
Tensor unaryBackward(UnaryOp op, const Tensor& gy, const Tensor& saved, double p = 0.0);

}  // namespace lockstep::kernels
