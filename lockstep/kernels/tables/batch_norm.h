#pragma once
// batch_norm2d (kernels/batch_norm.h), as each backend provides it (see kernels/dispatch.h). The CPU
// kernels leave the running statistics to the entry point; the CUDA ones update them on the device.
// Only the CUDA kernels take a residual and p.relu (fused into their passes): the entry point hands
// the CPU kernels neither and runs the add and the relu itself.
#include "lockstep/kernels/batch_norm.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_BATCH_NORM_OPS(X) \
  X(batchNorm2dForward, BatchNormResult(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var, const Tensor& residual, const BatchNormParams& p)) \
  X(batchNorm2dBackward, BatchNormGrads(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias, const Tensor& mean, const Tensor& var, const Tensor& y, bool with_residual, const BatchNormParams& p))
// clang-format on

struct BatchNormKernels {
  static constexpr const char* kGroup = "batch_norm2d";
  LOCKSTEP_BATCH_NORM_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const BatchNormKernels kBatchNorm;
}
namespace reference {
extern const BatchNormKernels kBatchNorm;
}
namespace cuda {
extern const BatchNormKernels kBatchNorm;
}

}  // namespace lockstep::kernels
