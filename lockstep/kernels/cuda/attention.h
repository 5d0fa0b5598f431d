#pragma once
// lockstep's CUDA scaled dot-product attention (built with LOCKSTEP_CUDA only; kernels/attention.cpp
// routes GPU tensors here after its checks). Same inputs, results and dtypes as the CPU kernel: q
// [B, H, T, D], k/v [B, Hkv, S, D] strided with a contiguous last dim, causal masking, grouped-query
// heads, and dropout that drops exactly the weights the CPU drops (the same Philox draws, recomputed
// in the backward). An online softmax walks the keys, so nothing of size [T, S] is stored, and the
// backward recomputes the scores, once for dq and once for dk and dv (no atomics: deterministic).
// f32/bf16/f16 with head dims up to 64 run tiled (64 query rows by 64 keys per step through shared
// memory, as FlashAttention-2); f64 and head dims to 256 a warp per row (per query row for dq, per
// key row for dk and dv). Scores compute in f32 (f64 for f64). cuDNN's fused SDPA
// (fused_attention.h) is asked first.
#include "lockstep/kernels/attention.h"

namespace lockstep::kernels::cuda {

/// The largest head dim the GPU kernels take (a warp holds a row in registers).
constexpr int64_t kMaxAttentionHeadDim = 256;

AttentionOutput attentionForward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p);
AttentionGrads attentionBackward(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse, const AttentionParams& p);

}  // namespace lockstep::kernels::cuda
