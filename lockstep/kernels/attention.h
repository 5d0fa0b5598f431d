#pragma once
// Fused scaled dot-product attention, blocked as FlashAttention-2 (Dao 2023): the forward walks key
// blocks with an online softmax and keeps only the output and a per-row logsumexp; the backward
// recomputes each score block from q, k and the logsumexp. Neither materialises the [T, S] score
// matrix of a head: the working set is a few [64, 64] blocks per thread. Fully masked causal blocks
// are skipped. Block products run on oneDNN's sgemm; the loops are threaded over (batch, head,
// query block) in the forward and over (batch, kv head) in the backward.
// f64 (and LOCKSTEP_KERNELS=reference) runs the reference, which does materialise the scores:
// it is the plain definition the blocked kernel is tested against. bf16/f16 run emulated in f32.
#include <cstdint>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

struct AttentionParams {
  bool causal = false;  // key j visible to query i iff j <= i (torch's is_causal: top-left aligned)
  double dropout_p = 0.0;
  double scale = 1.0;
  /// Philox key and first counter of the dropout draws: weight (b, h, i, j) is kept iff the draw
  /// at counter offset + ((b * H + h) * T + i) * S + j is kept (kernels::dropoutKeeps).
  uint64_t seed = 0;
  uint64_t offset = 0;
  /// GPU only, set by kernels::philoxState inside a CUDA graph capture: {key, base} in device
  /// memory; the draws then start at base + offset under that key (kernels::PhiloxState).
  const uint64_t* philox_device = nullptr;
};

struct AttentionOutput {
  /// [B, H, T, D], q's dtype. Contiguous, or token-major (the cpu kernel's and cuDNN's: its memory
  /// is [B, T, H, D], so out.transpose(1, 2) is contiguous and merging the heads costs no copy).
  Tensor out;
  Tensor lse;  // [B, H, T] logsumexp of each scaled score row; f32 (f64 for f64 inputs)
};
inline void narrowResults(AttentionOutput& r, DType low) {
  if (r.out.defined()) r.out = r.out.to(low);
}

struct AttentionGrads {
  Tensor gq, gk, gv;  // shapes of q, k, v; contiguous or token-major as AttentionOutput::out
};
inline void narrowResults(AttentionGrads& r, DType low) {
  r.gq = r.gq.to(low);
  r.gk = r.gk.to(low);
  r.gv = r.gv.to(low);
}

/// q [B, H, T, D], k/v [B, Hkv, S, D], H % Hkv == 0, one floating dtype. Inputs may be strided as
/// long as their last dim is contiguous (no copy then).
AttentionOutput attentionForward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p);
/// Gradients from dL/dout and the forward's inputs, output and logsumexp. gout and out may be
/// strided as q may.
AttentionGrads attentionBackward(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse, const AttentionParams& p);
/// attentionBackward's gradients written into into's tensors (q's, k's and v's shapes; any strides,
/// e.g. the three parts of one fused projection's gradient). A GPU's cuDNN backward writes them in
/// place; elsewhere they are computed, then copied.
void attentionBackwardInto(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, const AttentionParams& p,
                           const AttentionGrads& into);

}  // namespace lockstep::kernels
