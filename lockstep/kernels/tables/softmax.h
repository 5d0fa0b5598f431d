#pragma once
// softmax and log_softmax (kernels/softmax.h), as each backend provides them (see
// kernels/dispatch.h). dim is already normalised to [0, x.dim()).
#include "lockstep/kernels/softmax.h"

namespace lockstep::kernels {

struct SoftmaxKernels {
  static constexpr const char* kGroup = "softmax";
  Tensor (*softmaxForward)(const Tensor& x, int64_t dim) = nullptr;
  Tensor (*softmaxBackward)(const Tensor& gy, const Tensor& y, int64_t dim) = nullptr;
  Tensor (*logSoftmaxForward)(const Tensor& x, int64_t dim) = nullptr;
  Tensor (*logSoftmaxBackward)(const Tensor& gy, const Tensor& y, int64_t dim) = nullptr;
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
