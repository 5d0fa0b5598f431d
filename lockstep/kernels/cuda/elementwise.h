#pragma once
// lockstep's CUDA kernels for element-wise arithmetic (built with LOCKSTEP_CUDA only; the entry
// points in kernels/accumulate.cpp, binary.cpp, unary.cpp route GPU tensors here). Semantics,
// layouts and errors are those of the CPU entry points; floating operands compute in f32 (f64 for
// f64) and round on store. Every call queues on the operands' device's current stream and never
// synchronises the host; operands on different devices are a ValueError naming both.
#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/unary.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// dst += alpha * src (same shape, any strides; src of another floating dtype is read as f32, or
/// f64 for an f64 dst).
void addInto(Tensor& dst, const Tensor& src, double alpha);

/// a op b with numpy broadcasting (any dtype for add/sub/mul; the checks are the caller's).
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
/// a op b for one shape and dense layout, one operand f32 and the other bf16/f16 (BinaryKernels'
/// binaryMixed): the f32 result, the narrow operand widened as it is read.
Tensor binaryMixed(BinaryOp op, const Tensor& a, const Tensor& b);
/// a op s, s cast to a's compute type.
Tensor binaryScalar(BinaryOp op, const Tensor& a, double s);
/// x *= factor in place, factor a 0-d floating tensor on x's GPU read there (no host
/// synchronisation): each element times the factor cast to the compute type (f32; f64 for f64),
/// rounded once.
void scaleInPlaceBy(Tensor& x, const Tensor& factor);

/// op(x) for floating x.
Tensor unary(UnaryOp op, const Tensor& x, double p);
/// dL/dx from dL/dy and the saved tensor (see unaryBackwardUsesOutput).
Tensor unaryBackward(UnaryOp op, const Tensor& gy, const Tensor& saved, double p);

}  // namespace lockstep::kernels::cuda
