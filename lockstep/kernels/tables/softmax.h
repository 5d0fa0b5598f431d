#pragma once
// softmax and log_softmax (kernels/softmax.h), as each backend provides them (see
// kernels/dispatch.h). dim is already normalised to [0, x.dim()).
#include "lockstep/kernels/softmax.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_SOFTMAX_OPS(X) \
  X(softmaxForward, Tensor(const Tensor& x, int64_t dim)) \
  X(softmaxBackward, Tensor(const Tensor& gy, const Tensor& y, int64_t dim)) \
  X(logSoftmaxForward, Tensor(const Tensor& x, int64_t dim)) \
  X(logSoftmaxBackward, Tensor(const Tensor& gy, const Tensor& y, int64_t dim))
// clang-format on

struct SoftmaxKernels {
  static constexpr const char* kGroup = "softmax";
  LOCKSTEP_SOFTMAX_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const SoftmaxKernels kSoftmax;
}
namespace reference {
extern const SoftmaxKernels kSoftmax;
}
namespace cuda {
extern const SoftmaxKernels kSoftmax;
}

}  // namespace lockstep::kernels
