#pragma once
// The element-wise arithmetic ops of kernels/binary.h, as each backend provides them (see
// kernels/dispatch.h).
#include "lockstep/kernels/binary.h"

namespace lockstep::kernels {

struct BinaryKernels {
  static constexpr const char* kGroup = "binary";
  Tensor (*binary)(BinaryOp op, const Tensor& a, const Tensor& b) = nullptr;
  Tensor (*binaryScalar)(BinaryOp op, const Tensor& a, double s) = nullptr;
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
