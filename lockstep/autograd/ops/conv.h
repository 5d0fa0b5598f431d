#pragma once
// 2-d convolution (NCHW logical shapes; activations may be laid out channels_last, which the oneDNN
// kernels prefer). conv2d's oneDNN results are always channels_last (an NCHW input is reordered once).
#include <array>
#include <cstdint>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool fuse_relu = false;  // relu(conv(x) + b) as one op (on the CPU the relu runs in place after it)
};
/// x [N, C, H, W], weight [O, C/groups, kH, kW], bias [O] or undefined.
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                const Conv2dOptions& opts = {});

}  // namespace lockstep::autograd
