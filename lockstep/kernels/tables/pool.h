#pragma once
// 2-d pooling (kernels/pool.h), as each backend provides it (see kernels/dispatch.h). Parameters
// arrive resolved (resolvePool2d).
#include "lockstep/kernels/pool.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_POOL_OPS(X) \
  X(maxPool2dForward, MaxPool2dResult(const Tensor& x, const Pool2dParams& p, bool training)) \
  X(maxPool2dBackward, Tensor(const Tensor& gy, const Tensor& x, const Tensor& workspace, const Pool2dParams& p)) \
  X(avgPool2dForward, Tensor(const Tensor& x, const Pool2dParams& p)) \
  X(avgPool2dBackward, Tensor(const Tensor& gy, const Tensor& x, const Pool2dParams& p)) \
  X(adaptiveAvgPool2dForward, Tensor(const Tensor& x, std::array<int64_t, 2> out)) \
  X(adaptiveAvgPool2dBackward, Tensor(const Tensor& gy, const Tensor& x, std::array<int64_t, 2> out))
// clang-format on

struct PoolKernels {
  static constexpr const char* kGroup = "pool2d";
  LOCKSTEP_POOL_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const PoolKernels kPool;
}
namespace reference {
extern const PoolKernels kPool;
}
namespace cuda {
extern const PoolKernels kPool;
}

}  // namespace lockstep::kernels
