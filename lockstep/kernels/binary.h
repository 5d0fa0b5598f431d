#pragma once
// Broadcasting element-wise arithmetic (numpy rules). Floating operands of different dtypes give
// the wider dtype (PyTorch's promotion: f64 > f32 > bf16, f16; bf16 with f16 gives f32); any other
// dtype mismatch is a ValueError naming both dtypes, an incompatible shape one naming the op and
// both shapes. The result is dense; it keeps an operand's layout (e.g. channels_last) when that
// operand already has the result's shape. An f32 operand with a bf16/f16 one of the same shape and
// dense layout (autocast's residual add: an f32 stream plus a 16-bit layer output) is one pass that
// widens the narrow operand as it reads it; other mixes widen a copy first.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

enum class BinaryOp { add, sub, mul, div };

/// "add", "sub", "mul", "div" (used in error messages).
const char* binaryOpName(BinaryOp op);

/// a op b with broadcasting.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
/// The dtype of binary(op, a, b): the operands' dtype, or the wider of two floating dtypes.
DType binaryResultDType(DType a, DType b);
/// a op s for a scalar s (a's dtype).
Tensor binaryScalar(BinaryOp op, const Tensor& a, double s);

/// The checks shared by every backend: the same dtype or two floating ones, broadcastable shapes.
/// Returns the result shape.
Shape checkBinary(BinaryOp op, const Tensor& a, const Tensor& b);
/// div needs a floating dtype.
void checkDivisible(BinaryOp op, const Tensor& a);

}  // namespace lockstep::kernels
