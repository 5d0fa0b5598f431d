#pragma once
// 2-d max, average and adaptive average pooling on a GPU: lockstep's own kernels (built with
// LOCKSTEP_CUDA only; kernels/pool.cpp routes GPU tensors here), following PyTorch's window rules
// exactly as the CPU reference does (ceil_mode, count_include_pad, NaN wins a max). Outputs and input
// gradients take x's layout (kernels/layout.h); any input strides are read as they are. The
// backward passes gather (each input element sums the windows that cover it), so they are
// deterministic and need no atomics. Accumulation in f32 (f64 for f64).
#include <array>

#include "lockstep/kernels/pool.h"

namespace lockstep::kernels::cuda {

/// With training, the workspace holds each maximum's i64 index within its [H, W] plane, one per
/// output in [N, C, oh, ow] row-major order (the reference kernels' convention).
MaxPool2dResult maxPool2dForward(const Tensor& x, const Pool2dParams& p, bool training);
/// Without a workspace each covering window's maximum is found again from x.
Tensor maxPool2dBackward(const Tensor& gy, const Tensor& x, const Tensor& workspace, const Pool2dParams& p);
Tensor avgPool2dForward(const Tensor& x, const Pool2dParams& p);
Tensor avgPool2dBackward(const Tensor& gy, const Tensor& x, const Pool2dParams& p);
Tensor adaptiveAvgPool2dForward(const Tensor& x, std::array<int64_t, 2> out);
Tensor adaptiveAvgPool2dBackward(const Tensor& gy, const Tensor& x, std::array<int64_t, 2> out);

}  // namespace lockstep::kernels::cuda
