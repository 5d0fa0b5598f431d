#pragma once
// Fused (flash-style) scaled dot-product attention: one node, forward and backward in kernels/.
// Thread-safety: as every op, safe to call from several threads on distinct tensors.
#include <optional>

#include "lockstep/autograd/variable.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::autograd {

struct AttentionOptions {
  /// Causal mask aligned top-left as torch's is_causal: query i sees keys j <= i (also when T != S).
  bool causal = false;
  /// Dropout on the attention weights (after softmax), applied when > 0 (as torch's functional
  /// form, the caller passes 0 in eval). The mask is never stored: each weight's keep decision is
  /// the Philox draw at counter (generator offset at forward + ((b * H + h) * T + i) * S + j), so
  /// the backward recomputes it; the generator advances by B * H * T * S.
  double dropout_p = 0.0;
  /// Scale of q k^T; default 1 / sqrt(D).
  std::optional<double> scale{};
};

/// Fused scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention):
/// q [B, H, T, D], k and v [B, Hkv, S, D] with H a multiple of Hkv (grouped-query attention, as
/// torch's enable_gqa=True: query head h reads kv head h / (H / Hkv)) -> [B, H, T, D] contiguous.
/// Blocked with an online softmax: forward keeps only the output and a logsumexp [B, H, T], the
/// backward recomputes the score blocks; no B x H x T x S tensor exists in either. q, k, v may be
/// strided views (e.g. transpose(1, 2) of [B, T, H, D]) as long as the last dim is contiguous.
Variable scaledDotProductAttention(const Variable& q, const Variable& k, const Variable& v,
                                   const AttentionOptions& opts = {}, Generator& gen = defaultGenerator());

/// A transformer's attention from one fused projection (GPT's c_attn): qkv [B, T, 3 * H * D], q, k
/// and v side by side in its last dim, -> [B, T, H * D], the heads merged. The values of
/// splitting qkv into thirds, viewing each as [B, H, T, D] heads, scaledDotProductAttention and
/// merging the heads; the backward writes the three heads' gradients into one [B, T, 3 * H * D]
/// gradient (on a GPU, cuDNN's backward in place) instead of zero-filling it and adding each third.
Variable packedQkvAttention(const Variable& qkv, int64_t heads, const AttentionOptions& opts = {},
                            Generator& gen = defaultGenerator());

}  // namespace lockstep::autograd
