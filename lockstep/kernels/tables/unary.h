#pragma once
// The element-wise math ops of kernels/unary.h, as each backend provides them (see
// kernels/dispatch.h).
#include "lockstep/kernels/unary.h"

namespace lockstep::kernels {

struct UnaryKernels {
  static constexpr const char* kGroup = "unary";
  Tensor (*unary)(UnaryOp op, const Tensor& x, double p) = nullptr;
  Tensor (*unaryBackward)(UnaryOp op, const Tensor& gy, const Tensor& saved, double p) = nullptr;
};

namespace onednn {
extern const UnaryKernels kUnary;
}
namespace reference {
extern const UnaryKernels kUnary;
}
namespace cuda {
extern const UnaryKernels kUnary;
}

}  // namespace lockstep::kernels
