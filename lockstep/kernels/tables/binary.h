#pragma once
// The element-wise arithmetic ops of kernels/binary.h, as each backend provides them (see
// kernels/dispatch.h).
#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// binaryMixed: a op b for operands of one shape and one dense layout, one f32 and the other bf16 or
// f16 (either order); the f32 result in that layout, the narrow operand widened as it is read.

// clang-format off
#define LOCKSTEP_BINARY_OPS(X) \
  X(binary, Tensor(BinaryOp op, const Tensor& a, const Tensor& b)) \
  X(binaryScalar, Tensor(BinaryOp op, const Tensor& a, double s)) \
  X(binaryMixed, Tensor(BinaryOp op, const Tensor& a, const Tensor& b))
// clang-format on

struct BinaryKernels {
  static constexpr const char* kGroup = "binary";
  LOCKSTEP_BINARY_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const BinaryKernels kBinary;
}
namespace reference {
extern const BinaryKernels kBinary;
}
namespace cuda {
extern const BinaryKernels kBinary;
}

}  // namespace lockstep::kernels
