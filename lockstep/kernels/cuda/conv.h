#pragma once
// 2-d convolution on a GPU through cuDNN 9's convolution API (cudnn_cnn; built with LOCKSTEP_CUDA
// only; kernels/conv.cpp routes GPU tensors here). Same shapes and checks as kernels/conv.h.
//
// Layouts (unlike the oneDNN kernels, which make everything channels_last, and as PyTorch on a GPU):
// a channels_last x that is not also contiguous computes in NHWC, any other in NCHW (a contiguous
// copy where x is neither); y and dL/dx come in that layout, and conv2dInput(x) gives x in it. With
// NHWC the weight is handed to cuDNN in NHWC filter order too (what its tensor-core kernels take);
// the weight gradient comes back [O, C/g, kH, kW] contiguous as on the CPU. f64 always computes in
// NCHW (cuDNN's f64 kernels; the CPU reference returns contiguous tensors too). Workspaces come from
// the device's caching allocator.
//
// Algorithms follow kernels::gpuMathOptions() (kernels/gpu_math_options.h, torch.backends' meanings),
// chosen once per shape and options: cuDNN's heuristics (the _v7 queries), or with cudnn_benchmark
// the fastest by cudnnFind*AlgorithmEx; with cudnn_deterministic (lockstep's default) only among those
// cuDNN reports deterministic, so two runs give the same bits (a shape with none is a
// NotSupportedError naming it and the option). LOCKSTEP_CUDNN_VERBOSE=1 prints each choice once, to
// stderr (the problem, the pass, the algorithm, math type and workspace, heuristic or timed).
//
// Precision: bf16/f16 on tensor cores (CUDNN_TENSOR_OP_MATH, as PyTorch) with f32 accumulation, f64
// in f64. f32 follows cudnn_allow_tf32 (default true, as
// PyTorch's torch.backends.cudnn.allow_tf32): cuDNN may use TF32 tensor cores (10-bit mantissa
// inputs, f32 accumulation), so f32 results differ from the CPU's by ~1e-3 relative; false keeps to
// FMA kernels (CUDNN_FMA_MATH) and full f32.
#include "lockstep/kernels/conv.h"

namespace lockstep::kernels::cuda {

Tensor conv2dInput(const Tensor& x);
Tensor conv2dWeight(const Tensor& weight, const Tensor& x);
Tensor conv2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
Tensor conv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p);
/// gx += dL/dx in one cuDNN call (beta 1), where gx is dense in the layout conv2dBackwardData would
/// return; false (nothing written) otherwise.
bool conv2dBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& weight,
                            const Conv2dParams& p);
Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy, const Tensor& x, const Shape& weight_shape,
                                        bool with_bias, const Conv2dParams& p);

}  // namespace lockstep::kernels::cuda
