#pragma once
// conv2d (kernels/conv.h), as each backend provides it (see kernels/dispatch.h). conv2dInput
// puts an input into the layout the backend's convolutions read fastest.
#include "lockstep/kernels/conv.h"

namespace lockstep::kernels {

struct ConvKernels {
  static constexpr const char* kGroup = "conv2d";
  Tensor (*conv2dInput)(const Tensor& x) = nullptr;
  Tensor (*conv2dForward)(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Conv2dParams& p) = nullptr;
  Tensor (*conv2dBackwardData)(const Tensor& gy, const Tensor& x, const Tensor& weight,
                               const Conv2dParams& p) = nullptr;
  Conv2dWeightGrads (*conv2dBackwardWeights)(const Tensor& gy, const Tensor& x, const Shape& weight_shape,
                                             bool with_bias, const Conv2dParams& p) = nullptr;
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
