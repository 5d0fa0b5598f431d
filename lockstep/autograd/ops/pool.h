#pragma once
// 2-d max, average and adaptive average pooling (NCHW logical shapes; the input's memory format is
// kept).
#include <array>
#include <cstdint>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

struct Pool2dOptions {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0 = same as kernel (PyTorch's default)
  std::array<int64_t, 2> padding{0, 0};
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
Variable maxPool2d(const Variable& x, const Pool2dOptions& opts);
Variable avgPool2d(const Variable& x, const Pool2dOptions& opts);
/// Output [N, C, oh, ow] with PyTorch's adaptive bin boundaries.
Variable adaptiveAvgPool2d(const Variable& x, std::array<int64_t, 2> output_size);

}  // namespace lockstep::autograd
