#pragma once
// 2-d convolution (NCHW logical shapes). The output is channels_last when x is (which includes
// every C=1 NCHW tensor, where both layouts coincide), contiguous otherwise, so a channels_last
// network never reorders activations. Weights are [O, C/groups, kH, kW] contiguous; the oneDNN
// kernels reorder them into whatever blocked layout the primitive prefers.
#include <array>
#include <cstdint>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool fuse_relu = false;  // forward only: y = relu(conv(x) + b); backward takes the masked gradient
};

struct Conv2dWeightGrads {
  Tensor weight;  // [O, C/groups, kH, kW] contiguous
  Tensor bias;    // [O], undefined when the forward had no bias
};

/// [N, O, oh, ow]; ValueError naming the op and the shapes when x, weight and bias do not fit.
Shape conv2dOutputShape(const Shape& x, const Shape& weight, const Conv2dParams& p);
/// Checks x/weight/bias (bias may be undefined) for conv2d and returns the output shape.
Shape checkConv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

/// y = conv(x, weight) + bias (bias may be undefined), relu'd when p.fuse_relu.
Tensor conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
/// dL/dx (x's shape and layout) from dL/dy; x is used for its shape and layout only.
Tensor conv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p);
/// dL/dweight and, when with_bias, dL/dbias, from dL/dy and the forward's input x.
Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy, const Tensor& x, const Shape& weight_shape, bool with_bias,
                                        const Conv2dParams& p);

namespace onednn {
Tensor conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
Tensor conv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p);
Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy, const Tensor& x, const Shape& weight_shape, bool with_bias,
                                        const Conv2dParams& p);
}  // namespace onednn

namespace reference {
Tensor conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
Tensor conv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p);
Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy, const Tensor& x, const Shape& weight_shape, bool with_bias,
                                        const Conv2dParams& p);
}  // namespace reference

}  // namespace lockstep::kernels
