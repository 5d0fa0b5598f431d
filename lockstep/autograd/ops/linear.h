#pragma once
// Dense layers: linear and matmul.
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// y = x W^T + b; x [..., in], weight [out, in], bias [out] or undefined.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);
/// residual + linear(x, weight, bias) as one op: a transformer block's residual add fused into its
/// projection (kernels::linearResidualForward: on a GPU the GEMM reads the residual and writes the
/// sum). residual keeps its dtype under autocast (the f32 stream), the layer runs as linear does; the
/// result has the wider of the two dtypes, as add(residual, linear(...)) gives, and its gradient
/// reaches the residual as it is and the layer in its compute dtype.
Variable linearResidual(const Variable& residual, const Variable& x, const Variable& weight,
                        const Variable& bias);
/// A transformer MLP, proj(gelu_tanh(fc(x))) (GPT-2's c_fc, GELU, c_proj), as one op: on a GPU the
/// GELU and fc's bias (and its gradient) run in the epilogues of the GEMMs around them
/// (kernels::linearGeluTanhForward, linearBackwardDataGeluTanh), with no pass of their own over the
/// [..., hidden] activation. Elsewhere the same kernels as linear(gelu(linear(x, fc_weight,
/// fc_bias), tanh), proj_weight, proj_bias), which it equals. Autocast as linear; biases may be
/// undefined. With a residual, residual + proj(...), its add fused into proj as linearResidual's.
Variable geluMlp(const Variable& x, const Variable& fc_weight, const Variable& fc_bias,
                 const Variable& proj_weight, const Variable& proj_bias,
                 const Variable& residual = Variable());
/// Matrix product with numpy/torch.matmul semantics for 2-d and batched (>= 3-d, broadcast batch) inputs.
Variable matmul(const Variable& a, const Variable& b);

}  // namespace lockstep::autograd
