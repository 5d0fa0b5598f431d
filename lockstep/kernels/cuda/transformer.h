#pragma once
// lockstep's CUDA kernels for the transformer ops of kernels/transformer.h (built with LOCKSTEP_CUDA
// only; that file routes GPU tensors here after its checks). Results have the CPU's shapes and
// dtypes; rows compute in f32 (f64 for f64) and round on store.
//
// The embedding's indices live on the GPU. Its forward checks them on the device: an index out of
// range is an IndexError naming it and its position, as on the CPU, which costs one wait for the
// stream. Inside a CUDA graph capture there is no wait and such a row comes out NaN instead. Its
// backward sorts the positions by index (CUB's radix sort) and sums each row's gradients in
// position order, so it is deterministic.
#include <utility>

#include "lockstep/kernels/transformer.h"

namespace lockstep::kernels::cuda {

Tensor embeddingForward(const Tensor& weight, const Tensor& indices);
Tensor embeddingBackward(const Tensor& gy, const Tensor& indices, int64_t num_rows, int64_t padding_idx);
RmsNormOutput rmsNormForward(const Tensor& x, const Tensor& weight, double eps, DType y_dtype);
/// With gx_into (contiguous, x's shape and dtype): dL/dx added into it in the same pass, rounded to
/// x's dtype first as a separate add would see it; the result's gx is undefined then.
RmsNormGrads rmsNormBackward(const Tensor& gy, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                             Tensor* gx_into = nullptr);
Tensor swigluForward(const Tensor& gate, const Tensor& up);
std::pair<Tensor, Tensor> swigluBackward(const Tensor& gy, const Tensor& gate, const Tensor& up);
/// sign +1: the rotation (forward); -1: its inverse (the backward).
Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, int sign);

}  // namespace lockstep::kernels::cuda
