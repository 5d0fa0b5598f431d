#pragma once
// 2-d pooling (kernels/pool.h), as each backend provides it (see kernels/dispatch.h). Parameters
// arrive resolved (resolvePool2d).
#include "lockstep/kernels/pool.h"

namespace lockstep::kernels {

struct PoolKernels {
  static constexpr const char* kGroup = "pool2d";
  MaxPool2dResult (*maxPool2dForward)(const Tensor& x, const Pool2dParams& p, bool training) = nullptr;
  Tensor (*maxPool2dBackward)(const Tensor& gy, const Tensor& x, const Tensor& workspace,
                              const Pool2dParams& p) = nullptr;
  Tensor (*avgPool2dForward)(const Tensor& x, const Pool2dParams& p) = nullptr;
  Tensor (*avgPool2dBackward)(const Tensor& gy, const Tensor& x, const Pool2dParams& p) = nullptr;
  Tensor (*adaptiveAvgPool2dForward)(const Tensor& x, std::array<int64_t, 2> out) = nullptr;
  Tensor (*adaptiveAvgPool2dBackward)(const Tensor& gy, const Tensor& x,
                                      std::array<int64_t, 2> out) = nullptr;
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
