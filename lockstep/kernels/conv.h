#pragma once
// 2-d convolution (NCHW logical shapes). The oneDNN kernels compute channels_last: their outputs
// and input gradients are channels_last whatever x's layout (an NCHW x with C > 1 is reordered once;
// for C = 1 both layouts coincide), so a network never reorders activations between layers and
// their backward passes. The reference kernels return contiguous tensors. Weights are
// [O, C/groups, kH, kW] contiguous; the oneDNN kernels reorder them into whatever blocked layout
// the primitive prefers. Undefined bias = no bias.
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
/// Rounds the floating results of an f32 kernel back to `low` (the dispatcher's emulation of bf16/f16).
inline void narrowResults(Conv2dWeightGrads& r, DType low) {
  if (r.weight.defined()) r.weight = r.weight.to(low);
  if (r.bias.defined()) r.bias = r.bias.to(low);
}

/// [N, O, oh, ow]; ValueError naming the op and the shapes when x, weight and bias do not fit.
Shape conv2dOutputShape(const Shape& x, const Shape& weight, const Conv2dParams& p);
/// Checks x/weight/bias (bias may be undefined) for conv2d and returns the output shape.
Shape checkConv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
/// Checks x/weight and that gy has the output's shape, for the data gradient.
void checkConv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p);

/// x in the layout the kernels compute in (x itself when it already is): callers that keep x for
/// the backward pass keep this one, so the backward does not reorder x again.
Tensor conv2dInput(const Tensor& x);
/// The weight in the layout the kernels take it with input x (from conv2dInput; the weight itself
/// when it already is): callers keep this one for the backward too, so a step reorders it once.
Tensor conv2dWeight(const Tensor& weight, const Tensor& x);
/// y = conv(x, weight) + bias (bias may be undefined), relu'd when p.fuse_relu.
Tensor conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
/// dL/dx (x's shape and layout) from dL/dy; x is used for its shape and layout only.
Tensor conv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p);
/// dL/dweight and, when with_bias, dL/dbias, from dL/dy and the forward's input x.
Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy, const Tensor& x, const Shape& weight_shape,
                                        bool with_bias, const Conv2dParams& p);

/// Whether the CPU (oneDNN) kernels compute 3x3 stride-1 f32 convolutions with Winograd's
/// F(4x4, 3x3) where it is faster (AVX-512 CPUs, enough channels and output tiles: 1.35-1.85x per
/// convolution in ResNet-18 at batch 32). Its results differ from the direct kernels' by about
/// 1e-6 relative (the direct ones' own rounding is about 1e-7), a deterministic function of the
/// shape either way. Default: on, unless LOCKSTEP_CONV_WINOGRAD=0. PyTorch's CPU convolutions are
/// direct: turn it off to compare with them value for value.
bool cpuConvWinograd();
/// Sets it for the whole process, from the next convolution on. Thread-safe.
void setCpuConvWinograd(bool on);

}  // namespace lockstep::kernels
