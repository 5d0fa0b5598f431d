#pragma once
// Convolution, pooling and batch normalisation (NCHW logical shapes; activations may be laid out
// channels_last, which the oneDNN kernels prefer). conv2d's oneDNN results are always channels_last
// (an NCHW input is reordered once); pooling and batch norm keep the input's memory format.
#include <array>
#include <cstdint>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool fuse_relu = false;  // relu(conv(x) + b) as one oneDNN primitive with a post-op
};
/// x [N, C, H, W], weight [O, C/groups, kH, kW], bias [O] or undefined.
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                const Conv2dOptions& opts = {});

struct Pool2dOptions {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0 = same as kernel (PyTorch's default)
  std::array<int64_t, 2> padding{0, 0};
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
Variable maxPool2d(const Variable& x, const Pool2dOptions& opts);
/// maxPool2d(conv2d(x, weight, bias, conv), pool), then relu when `relu` (relu after a max-pool equals
/// relu before it), as one op with the same values and gradients (up to the order of the weight
/// gradient's sums). It runs over the batch in chunks sized so the convolution's output stays in
/// the core's cache, and keeps only the pooling workspace for backward, never that output: far
/// less memory traffic for a CNN's first, largest layers. conv.fuse_relu must be false.
Variable conv2dMaxPool2d(const Variable& x, const Variable& weight, const Variable& bias,
                         const Conv2dOptions& conv, const Pool2dOptions& pool, bool relu);
Variable avgPool2d(const Variable& x, const Pool2dOptions& opts);
/// Output [N, C, oh, ow] with PyTorch's adaptive bin boundaries.
Variable adaptiveAvgPool2d(const Variable& x, std::array<int64_t, 2> output_size);

struct BatchNormOptions {
  bool training = true;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch (unbiased var)
  double eps = 1e-5;
};
/// x [N, C, H, W]; weight/bias [C] or undefined (affine off). running_mean/var [C] tensors are
/// updated in place when training and used when not; they may be undefined when training.
Variable batchNorm2d(const Variable& x, const Variable& weight, const Variable& bias, Tensor running_mean,
                     Tensor running_var, const BatchNormOptions& opts);

}  // namespace lockstep::autograd
