#pragma once
// Element-wise math on one tensor: neg, exp, log, sqrt, pow. Forward returns a new tensor in x's
// layout (dense); backward returns dL/dx from dL/dy and what the forward saved.
#include <cmath>

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

/// torch's pow with a scalar exponent (ATen's pow_tensor_scalar_optimized_kernel) in T (float for
/// the cpu loops, double for the reference): the exponents it computes by multiplication, square
/// roots or reciprocals, std::pow for the others. The CUDA kernels mirror it on the device.
template <typename T>
T powOfScalar(T x, double p) {
  if (p == 2.0) return x * x;
  if (p == 3.0) return x * x * x;
  if (p == 0.5) return std::sqrt(x);
  if (p == -0.5) return T(1) / std::sqrt(x);
  if (p == -1.0) return T(1) / x;
  if (p == -2.0) return T(1) / (x * x);
  return std::pow(x, static_cast<T>(p));
}

}  // namespace lockstep::kernels
