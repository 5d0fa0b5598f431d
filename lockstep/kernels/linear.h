#pragma once
// Dense layers and matrix products. f32 runs on oneDNN (inner_product for linear, matmul for
// matmul), f64 on the reference loops. Results are new contiguous tensors.
#include <utility>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// y = x W^T + b. x [..., in], weight [out, in], bias [out] or undefined; y [..., out].
Tensor linearForward(const Tensor& x, const Tensor& weight, const Tensor& bias);
/// dL/dx [..., in] from gy [..., out] and weight [out, in].
Tensor linearBackwardData(const Tensor& gy, const Tensor& weight);
/// ValueError unless weight is [out, in] and gy ends in out; returns x's shape (gy's with in last).
Shape checkLinearBackwardData(const Tensor& gy, const Tensor& weight);
/// {dL/dW [out, in], dL/db [out] (undefined unless with_bias)} from gy [..., out] and x [..., in].
std::pair<Tensor, Tensor> linearBackwardWeights(const Tensor& gy, const Tensor& x, bool with_bias);

/// residual + (x W^T + b): a layer's output added to the residual stream it writes to (a transformer
/// block's `x + proj(y)`), as torch's `residual + F.linear(x, weight, bias)`. residual has the
/// layer's output shape; the result has the wider of residual's and x's dtypes (binary()'s rule:
/// autocast's f32 stream plus a bf16 layer gives f32). On a GPU one cuBLASLt GEMM that reads the
/// residual as its C matrix (beta 1) and writes the sum (kernels/cuda/blas.h), where cuBLASLt takes
/// the problem (a contiguous residual in the result's dtype, rows of whole 16-byte runs): no pass of
/// its own over the [..., out] activation, and a 16-bit x W^T + b is not rounded to 16 bits before
/// the add. Elsewhere linearForward, then the add.
Tensor linearResidualForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& residual);

/// A transformer MLP's first layer and its GELU (tanh form, GPT-2's): {y, z}, z = x W^T + b the
/// pre-activation (the backward's operand) and y = gelu_tanh(z). On a GPU one cuBLASLt GEMM with
/// the bias and the GELU in its epilogue (CUBLASLT_EPILOGUE_GELU_AUX_BIAS, z written beside y)
/// where cuBLASLt's epilogues take the problem (bf16, f16 or f32, rows of whole 16-byte runs):
/// no separate pass over the [..., out] activation. Elsewhere linearForward then geluTanhForward.
std::pair<Tensor, Tensor> linearGeluTanhForward(const Tensor& x, const Tensor& weight, const Tensor& bias);
/// The data gradient of the layer after such a GELU, through the GELU: {gz, gb}, gz =
/// gelu_tanh'(z) * (gy W) with gy [..., out] and weight [out, in] the next layer's and z [..., in]
/// linearGeluTanhForward's pre-activation; gb, the first layer's bias gradient (column sums of gz).
/// On a GPU with LOCKSTEP_GELU_BACKWARD=epilogue one GEMM with the GELU's derivative and the bias
/// gradient in its epilogue (CUBLASLT_EPILOGUE_DGELU_BGRAD); by default, as elsewhere, the GEMM and
/// then geluTanhBackward. gb comes back only from that epilogue and only with_bias;
/// undefined otherwise, the caller then takes it with the weight gradient (linearBackwardWeights),
/// as a plain linear layer's backward does.
std::pair<Tensor, Tensor> linearBackwardDataGeluTanh(const Tensor& gy, const Tensor& weight, const Tensor& z,
                                                     bool with_bias);

/// torch.matmul for operands of >= 2 dims: a [..., M, K] @ b [..., K, N] -> [batch..., M, N], where
/// the batch dims broadcast (numpy rules). Any strides (transposed views need no copy on oneDNN).
Tensor matmul(const Tensor& a, const Tensor& b);
/// {dL/da, dL/db} of matmul (each summed over the batch dims it was broadcast along); a gradient is
/// computed only when asked for (undefined otherwise).
std::pair<Tensor, Tensor> matmulBackward(const Tensor& gy, const Tensor& a, const Tensor& b, bool need_a,
                                         bool need_b);

}  // namespace lockstep::kernels
