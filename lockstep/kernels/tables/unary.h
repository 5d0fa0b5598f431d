#pragma once
// The element-wise math ops of kernels/unary.h, as each backend provides them (see
// kernels/dispatch.h).
#include "lockstep/kernels/tables/table.h"
#include "lockstep/kernels/unary.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_UNARY_OPS(X) \
  X(unary, Tensor(UnaryOp op, const Tensor& x, double p)) \
  X(unaryBackward, Tensor(UnaryOp op, const Tensor& gy, const Tensor& saved, double p))
// clang-format on

struct UnaryKernels {
  static constexpr const char* kGroup = "unary";
  LOCKSTEP_UNARY_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const UnaryKernels kUnary;
}
namespace reference {
extern const UnaryKernels kUnary;
}
namespace cuda {
extern const UnaryKernels kUnary;
}

}  // namespace lockstep::kernels
