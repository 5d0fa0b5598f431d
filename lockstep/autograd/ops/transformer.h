#pragma once
// The ops a decoder-only transformer needs beyond linear.h and math.h: embedding, RMSNorm, the
// GELU/SiLU/SwiGLU activations, split, rotary position embeddings, and fused (flash-style)
// scaled dot-product attention. Each is one node in the graph, forward and backward in kernels/.
// Thread-safety: as every op, safe to call from several threads on distinct tensors.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::autograd {

/// torch.nn.functional.embedding: weight [V, D], indices i64 of any shape -> [..., D]. The backward
/// scatter-adds into the table's gradient (repeated indices accumulate); row padding_idx gets no
/// gradient. padding_idx = -1 (the default) means no padding row (torch's None); otherwise it must
/// be in [0, V). An index outside [0, V) is an IndexError naming it and its position; indices on
/// another device than weight are a ValueError.
Variable embedding(const Variable& weight, const Tensor& indices, int64_t padding_idx = -1);

/// RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * weight (torch.nn.functional.rms_norm);
/// weight [D] or undefined.
Variable rmsNorm(const Variable& x, const Variable& weight, double eps = 1e-6);

enum class GeluApproximation { none, tanh };
/// GELU with torch's `approximate` ("none" = erf, as gelu(x); "tanh" = GPT-2's tanh form).
Variable gelu(const Variable& x, GeluApproximation approximate);
/// x * sigmoid(x) (torch.nn.functional.silu).
Variable silu(const Variable& x);
/// silu(gate) * up in one pass; the backward node keeps only (gate, up). Same shapes.
Variable swiglu(const Variable& gate, const Variable& up);

/// torch.split: consecutive pieces of split_size along dim (the last one may be shorter). The
/// pieces are views of x (no copy), as in torch.
std::vector<Variable> split(const Variable& x, int64_t split_size, int64_t dim);
/// Pieces of the given sizes (they must sum to x.size(dim)).
std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim);

/// Rotary position embedding, HF-Llama "rotate_half" convention: x [B, H, T, D] (D even),
/// cos/sin [T, D/2] (plain tensors, no gradient, any floating dtype):
///   out[..., :D/2] = x1 cos - x2 sin, out[..., D/2:] = x2 cos + x1 sin,
/// with x1 = x[..., :D/2], x2 = x[..., D/2:]. Result contiguous, x's dtype. cos and sin must be on
/// x's device (ValueError otherwise).
Variable applyRotary(const Variable& x, const Tensor& cos, const Tensor& sin);
/// cos, sin [T, D/2] f32 for positions position_offset .. position_offset + T - 1:
/// angle(t, i) = (t + position_offset) * theta^(-2i / D) (computed in f64, stored f32). On the host.
std::pair<Tensor, Tensor> rotaryTables(int64_t T, int64_t D, double theta = 10000.0,
                                       int64_t position_offset = 0);

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

}  // namespace lockstep::autograd
