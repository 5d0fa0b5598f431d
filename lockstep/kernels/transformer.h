#pragma once
// The element-wise and row-wise kernels of a transformer block that oneDNN 2.6 has no primitive
// for: embedding gather/scatter-add, RMSNorm, fused SwiGLU and rotary position embeddings. f32
// runs the loops in transformer.cpp (threaded over rows), f64 the reference loops, bf16/f16
// emulated in f32 (kernels/dispatch.h). Attention lives in kernels/attention.h.
#include <cstdint>
#include <optional>
#include <utility>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// weight [V, D], indices i64 (any shape) -> [..., D] in weight's dtype. Checks every index is in
/// [0, V) (IndexError naming the index and its position).
Tensor embeddingForward(const Tensor& weight, const Tensor& indices);
/// dL/dweight [num_rows, D] from dL/dy [..., D]: rows scatter-added by index; row padding_idx
/// (when >= 0) stays zero.
Tensor embeddingBackward(const Tensor& gy, const Tensor& indices, int64_t num_rows, int64_t padding_idx);

struct RmsNormOutput {
  Tensor y;     // x's shape, contiguous, x's dtype
  Tensor rstd;  // [rows] 1 / sqrt(mean(x^2) + eps); f32 (f64 for f64 inputs)
};
inline void narrowResults(RmsNormOutput& r, DType low) {
  if (r.y.defined()) r.y = r.y.to(low);
}
struct RmsNormGrads {
  Tensor gx;
  Tensor gweight;  // undefined when weight is
};
inline void narrowResults(RmsNormGrads& r, DType low) {
  if (r.gx.defined()) r.gx = r.gx.to(low);
  if (r.gweight.defined()) r.gweight = r.gweight.to(low);
}
/// Over the last dim of x; weight [D] or undefined. y_dtype (default x's): y rounded to it, as
/// layerNormForward's (autocast's RMSNorm before its linear layers).
RmsNormOutput rmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                             std::optional<DType> y_dtype = std::nullopt);
/// gy may have another floating dtype than x (a y_dtype forward's gradient), read as x's.
RmsNormGrads rmsNormBackward(const Tensor& gy, const Tensor& x, const Tensor& rstd, const Tensor& weight);
/// rmsNormBackward's checks: x floating with >= 1 dim, weight (when defined) [D] of x's dtype, gy
/// floating of x's shape.
void checkRmsNormBackward(const Tensor& gy, const Tensor& x, const Tensor& weight);

/// silu(gate) * up (same shapes) -> contiguous.
Tensor swigluForward(const Tensor& gate, const Tensor& up);
/// {dL/dgate, dL/dup}.
std::pair<Tensor, Tensor> swigluBackward(const Tensor& gy, const Tensor& gate, const Tensor& up);

/// Rotary embedding ("rotate_half"): x [..., T, D], cos/sin [T, D/2] -> contiguous, x's dtype.
Tensor rotaryForward(const Tensor& x, const Tensor& cos, const Tensor& sin);
/// dL/dx: the inverse rotation of gy.
Tensor rotaryBackward(const Tensor& gy, const Tensor& cos, const Tensor& sin);
/// The rotation's cos, sin [T, D/2] f32 for positions position_offset .. position_offset + T - 1:
/// angle(t, i) = (t + position_offset) * theta^(-2i / D) (HF Llama's inv_freq; computed in f64,
/// stored f32). Made on the host, once per model: move them with .to().
std::pair<Tensor, Tensor> rotaryTables(int64_t T, int64_t D, double theta = 10000.0,
                                       int64_t position_offset = 0);

}  // namespace lockstep::kernels
