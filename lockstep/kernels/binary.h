#pragma once
// Broadcasting element-wise arithmetic (numpy rules). Both operands must have the same dtype: a
// mismatch is a ValueError naming both dtypes (no silent promotion), an incompatible shape one
// naming the op and both shapes. The result is dense; it keeps an operand's layout (e.g.
// channels_last) when that operand already has the result's shape.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

enum class BinaryOp { add, sub, mul, div };

/// "add", "sub", "mul", "div" (used in error messages).
const char* binaryOpName(BinaryOp op);

/// a op b with broadcasting.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
/// a op s for a scalar s (a's dtype).
Tensor binaryScalar(BinaryOp op, const Tensor& a, double s);

/// The checks shared by every backend: same dtype, broadcastable shapes. Returns the result shape.
Shape checkBinary(BinaryOp op, const Tensor& a, const Tensor& b);
/// div needs a floating dtype.
void checkDivisible(BinaryOp op, const Tensor& a);

}  // namespace lockstep::kernels
