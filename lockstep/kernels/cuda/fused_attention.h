#pragma once
// Scaled dot-product attention through cuDNN's fused SDPA: FlashAttention-style forward and
// backward on tensor cores, built with the cuDNN frontend's graph API (built with LOCKSTEP_CUDA
// only; kernels/cuda/attention.cu asks here first and runs lockstep's own kernel when these return
// nothing).
//
// Which kernel runs (LOCKSTEP_GPU_ATTENTION):
//   auto (default)  cuDNN where it applies (and GpuMathOptions::cudnn_sdp, torch's
//                   enable_cudnn_sdp, is on): bf16/f16, head dim a multiple of 8 up to 256, no
//                   dropout (lockstep's kernel draws the CPU's Philox mask bit for bit, cuDNN its
//                   own), a cuDNN and GPU whose SDPA engine takes the problem. Otherwise lockstep's
//                   kernel (every dtype, dropout, any head dim to 256).
//   cudnn           cuDNN or a NotSupportedError saying why not (benchmarks, tests).
//   lockstep        lockstep's kernel always.
// The choice is printed once per process for each (device, dtype, head dim, mask, kernel), to
// stderr, with the reason when cuDNN was passed over.
//
// Same contract as the CPU kernel: q [B, H, T, D], k/v [B, Hkv, S, D] (grouped-query heads), any
// strides with a contiguous last dim (no copy when they are multiples of 8 elements), top-left
// causal mask, out token-major in q's dtype (memory [B, T, H, D], as the CPU kernel's), lse [B, H, T] f32
// (cuDNN's softmax stats: the logsumexp of each scaled score row), so either kernel's forward feeds either
// kernel's backward. The backward is deterministic (bitwise repeatable) while cudnn_deterministic is on
// (lockstep's default, kernels/gpu_math_options.h): cuDNN's dP-workspace algorithm, whose scratch is B * H *
// T * S * 2 bytes, so past max(256 MiB, 4 x the bytes of q, k, v and out) it runs a chunk of keys per
// call (each call's dK and dV whole, its rows' share of dQ summed in f32 in key order, so dQ is rounded
// twice): scratch linear in T. With it off, the faster dQ-atomics one, scratch linear in T, in one call.
#include <cstdint>
#include <optional>

#include "lockstep/kernels/attention.h"

namespace lockstep::kernels::cuda {

/// cuDNN's forward, or nothing when lockstep's kernel is to run (see above).
std::optional<AttentionOutput> fusedAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                     const AttentionParams& p);
/// cuDNN's backward, or nothing when lockstep's kernel is to run. With into, the gradients are
/// written into its tensors (q's, k's and v's shapes and q's dtype, strides cuDNN can write: a
/// contiguous last dim, the rest multiples of 8 elements, 16-byte aligned) and returned; nothing
/// happens (and nothing comes back) when they do not fit.
std::optional<AttentionGrads> fusedAttentionBackward(const Tensor& gout, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                                     const AttentionParams& p,
                                                     const AttentionGrads* into = nullptr);
/// kernels::attentionBackwardInto's GPU entry: cuDNN's backward into `into`; false when it did
/// not run (the caller computes the gradients and copies them).
bool attentionBackwardInto(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, const AttentionParams& p,
                           const AttentionGrads& into);

/// How many forward and backward passes cuDNN has run in this process (tests and benchmarks: which
/// kernel a problem took).
int64_t fusedAttentionRuns();
/// Of those, the backward passes that wrote the gradients into the caller's tensors
/// (attentionBackwardInto).
int64_t fusedAttentionInPlaceRuns();
/// Of those, the backward passes that ran a chunk of keys per cuDNN call.
int64_t fusedAttentionChunkedRuns();
/// Keys per cuDNN call of the backward: 0 (the default) chooses by size as above; n > 0 (a multiple
/// of 64) runs chunks of n keys whenever a problem has more (tests, benchmarks). Returns the value it
/// replaces; a ValueError for anything else.
int64_t setFusedAttentionKeyChunk(int64_t keys);

}  // namespace lockstep::kernels::cuda
