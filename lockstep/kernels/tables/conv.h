#pragma once
// conv2d (kernels/conv.h), as each backend provides it (see kernels/dispatch.h). conv2dInput and
// conv2dWeight put an input and a weight into the layouts the backend's convolutions read fastest.
#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_CONV_OPS(X) \
  X(conv2dInput, Tensor(const Tensor& x)) \
  X(conv2dWeight, Tensor(const Tensor& weight, const Tensor& x)) \
  X(conv2dForward, Tensor(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p)) \
  X(conv2dBackwardData, Tensor(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p)) \
  X(conv2dBackwardWeights, Conv2dWeightGrads(const Tensor& gy, const Tensor& x, const Shape& weight_shape, bool with_bias, const Conv2dParams& p))
// clang-format on

struct ConvKernels {
  static constexpr const char* kGroup = "conv2d";
  LOCKSTEP_CONV_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const ConvKernels kConv;
}
namespace reference {
extern const ConvKernels kConv;
}
namespace cuda {
extern const ConvKernels kConv;
}

}  // namespace lockstep::kernels
