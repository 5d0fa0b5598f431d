#pragma once
// batch_norm2d (kernels/batch_norm.h), as each backend provides it (see kernels/dispatch.h). The CPU
// kernels leave the running statistics to the entry point; the CUDA ones update them on the device.
// Every backend takes a residual and p.relu: lockstep's own (cpu, CUDA) in the normalisation's
// passes, oneDNN's as its binary and eltwise primitives after it, the reference in its loops.
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
namespace cpu {
extern const BatchNormKernels kBatchNorm;
}
namespace reference {
extern const BatchNormKernels kBatchNorm;
}
namespace cuda {
extern const BatchNormKernels kBatchNorm;
}

}  // namespace lockstep::kernels
