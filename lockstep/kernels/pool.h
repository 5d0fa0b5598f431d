#pragma once
// 2-d max/average pooling and adaptive average pooling (NCHW logical shapes). Outputs and input
// gradients keep x's layout (channels_last when x is, see conv.h).
#include <array>
#include <cstdint>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0 = same as kernel
  std::array<int64_t, 2> padding{0, 0};
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
};

/// [N, C, oh, ow] with PyTorch's rules (ceil_mode drops a last window that starts in the right
/// padding); ValueError naming `op` and the shape for bad parameters (padding over half the kernel).
Shape pool2dOutputShape(const Shape& x, const Pool2dParams& p, const char* op);
/// p with stride 0 replaced by the kernel size.
Pool2dParams resolvePool2d(const Pool2dParams& p);

struct MaxPool2dResult {
  Tensor y;
  Tensor workspace;  // where each maximum came from (training only; opaque, per implementation)
};
/// Rounds the floating results of an f32 kernel back to `low` (the dispatcher's emulation of bf16/f16).
inline void narrowResults(MaxPool2dResult& r, DType low) {
  if (r.y.defined()) r.y = r.y.to(low);
}
/// With training, keeps what the backward needs in `workspace`.
MaxPool2dResult maxPool2dForward(const Tensor& x, const Pool2dParams& p, bool training);
/// dL/dx from dL/dy; x is the forward's input, workspace the forward's (training) workspace. With a
/// defined workspace only x's shape, strides and dtype are used (its data is never read).
Tensor maxPool2dBackward(const Tensor& gy, const Tensor& x, const Tensor& workspace, const Pool2dParams& p);
Tensor avgPool2dForward(const Tensor& x, const Pool2dParams& p);
/// x is used for its shape and layout only.
Tensor avgPool2dBackward(const Tensor& gy, const Tensor& x, const Pool2dParams& p);
/// Bin i of n over a size-`in` axis covers [floor(i*in/n), ceil((i+1)*in/n)) (PyTorch's rule).
Tensor adaptiveAvgPool2dForward(const Tensor& x, std::array<int64_t, 2> out);
Tensor adaptiveAvgPool2dBackward(const Tensor& gy, const Tensor& x, std::array<int64_t, 2> out);

}  // namespace lockstep::kernels
