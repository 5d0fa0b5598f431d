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
/// {dL/dW [out, in], dL/db [out] (undefined unless with_bias)} from gy [..., out] and x [..., in].
std::pair<Tensor, Tensor> linearBackwardWeights(const Tensor& gy, const Tensor& x, bool with_bias);

/// torch.matmul for operands of >= 2 dims: a [..., M, K] @ b [..., K, N] -> [batch..., M, N], where
/// the batch dims broadcast (numpy rules). Any strides (transposed views need no copy on oneDNN).
Tensor matmul(const Tensor& a, const Tensor& b);
/// {dL/da, dL/db} of matmul (each summed over the batch dims it was broadcast along); a gradient is
/// computed only when asked for (undefined otherwise).
std::pair<Tensor, Tensor> matmulBackward(const Tensor& gy, const Tensor& a, const Tensor& b, bool need_a,
                                         bool need_b);

}  // namespace lockstep::kernels
