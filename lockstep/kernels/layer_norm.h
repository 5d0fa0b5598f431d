#pragma once
// Layer normalisation over the trailing dims given by normalized_shape:
//   y = (x - mean) / sqrt(var + eps) * weight + bias, statistics per leading index.
// weight and bias have shape normalized_shape, or are undefined (scale 1 / shift 0).
#include <optional>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

struct LayerNormOutput {
  Tensor y;         // x's shape, contiguous
  Tensor mean;      // [rows]: one per leading index; f32 (f64 for f64 inputs)
  Tensor variance;  // [rows], biased (divides by the normalised element count)
};
/// Rounds the floating results of an f32 kernel back to `low` (the dispatcher's emulation of bf16/f16).
inline void narrowResults(LayerNormOutput& r, DType low) {
  if (r.y.defined()) r.y = r.y.to(low);
}

struct LayerNormGrads {
  Tensor gx;
  Tensor gweight;  // undefined when weight is
  Tensor gbias;    // undefined when bias is
};
/// Rounds the floating results of an f32 kernel back to `low` (the dispatcher's emulation of bf16/f16).
inline void narrowResults(LayerNormGrads& r, DType low) {
  if (r.gx.defined()) r.gx = r.gx.to(low);
  if (r.gweight.defined()) r.gweight = r.gweight.to(low);
  if (r.gbias.defined()) r.gbias = r.gbias.to(low);
}

/// y_dtype (default: x's): y rounded to it from the normalisation's compute dtype, for an f32 x
/// whose normalisation feeds a bf16/f16 op under autocast (a transformer's LayerNorm before a
/// linear layer): the values that op's own cast of an f32 y would give, written once (a GPU writes
/// them directly; the CPU casts its f32 result).
LayerNormOutput layerNormForward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps, std::optional<DType> y_dtype = std::nullopt);
/// Gradients from dL/dy and the forward's input and statistics. gy may have another floating dtype
/// than x (a y_dtype forward's gradient): it is read as x's dtype (a GPU reads bf16/f16 gy of an f32
/// x as it is).
LayerNormGrads layerNormBackward(const Tensor& gy, const Tensor& x, const Tensor& mean,
                                 const Tensor& variance, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps);

/// Validates the arguments (trailing dims of x equal normalized_shape; weight/bias of that shape and
/// x's dtype). Returns the number of normalised elements per row.
int64_t checkLayerNorm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias);
/// checkLayerNorm, and gy floating of x's shape.
void checkLayerNormBackward(const Tensor& gy, const Tensor& x, const Shape& normalized_shape,
                            const Tensor& weight, const Tensor& bias);

}  // namespace lockstep::kernels
