#pragma once
// Gradient accumulation: dst += src, and the fused forms autograd's engine uses where a tensor has
// several readers (a residual stream, a ResNet block's input, an input cast for each of its
// readers): the reader whose backward runs last adds its gradient for the tensor into the gradient
// already held, in the pass that computes it, instead of writing it for a separate add.
#include <optional>

#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/layer_norm.h"
#include "lockstep/kernels/transformer.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// dst += alpha * src, element-wise; same shape (ValueError naming both otherwise), any strides,
/// floating dtypes (src is cast to dst's dtype).
void addInto(Tensor& dst, const Tensor& src, double alpha = 1.0);

// The fused forms: each adds the op's gradient for its input into gx (x's shape and dtype) and
// returns true; or returns false, having written nothing, where the backend has no such kernel for
// these operands (the CPU backends: oneDNN's backward primitives take no accumulation) or gx's
// layout or alignment is not what the kernel writes: the caller computes the gradient and adds it
// then. The norms' sums are bit for bit what computing the gradient and adding it gives; the GEMM's
// and the convolution's are within their rounding (cuBLASLt and cuDNN add before rounding once, and
// may pick another algorithm for an accumulating call), still the same from run to run.

/// gx += conv2dBackwardData(gy, x, weight, p) (cuDNN's beta = 1).
bool conv2dBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& weight,
                            const Conv2dParams& p);
/// gx += linearBackwardData(gy, weight) (cuBLASLt's beta = 1).
bool linearBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& weight);
/// gx += layerNormBackward(...).gx; the weight's and bias's gradients (gx undefined), or nullopt.
std::optional<LayerNormGrads> layerNormBackwardInto(Tensor& gx, const Tensor& gy, const Tensor& x,
                                                    const Tensor& mean, const Tensor& variance,
                                                    const Shape& normalized_shape, const Tensor& weight,
                                                    const Tensor& bias, double eps);
/// gx += rmsNormBackward(...).gx; the weight's gradient (gx undefined), or nullopt.
std::optional<RmsNormGrads> rmsNormBackwardInto(Tensor& gx, const Tensor& gy, const Tensor& x,
                                                const Tensor& rstd, const Tensor& weight);

}  // namespace lockstep::kernels
