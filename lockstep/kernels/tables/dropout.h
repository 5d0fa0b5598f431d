#pragma once
// Dropout (kernels/dropout.h), as each backend provides it (see kernels/dispatch.h). The forward
// draws from gen's Philox stream and advances it by x.numel().
#include "lockstep/kernels/dropout.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_DROPOUT_OPS(X) \
  X(dropoutForward, std::pair<Tensor, Tensor>(const Tensor& x, double p, Generator& gen)) \
  X(dropoutBackward, Tensor(const Tensor& gy, const Tensor& mask, double p))
// clang-format on

struct DropoutKernels {
  static constexpr const char* kGroup = "dropout";
  LOCKSTEP_DROPOUT_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const DropoutKernels kDropout;
}
namespace reference {
extern const DropoutKernels kDropout;
}
namespace cuda {
extern const DropoutKernels kDropout;
}

}  // namespace lockstep::kernels
