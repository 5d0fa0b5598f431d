#pragma once
// Dense layers and matrix products on a GPU through cuBLASLt (built with LOCKSTEP_CUDA only;
// kernels/linear.cpp routes GPU tensors here). Same shapes, checks and results as the CPU kernels of
// kernels/linear.h; outputs are new contiguous tensors on the operands' device, queued on its
// current stream without host synchronisation.
//
// Precision: f32 GEMMs compute in plain FP32 (CUBLAS_COMPUTE_32F: no TF32) unless
// kernels::gpuMathOptions().matmul_allow_tf32 (default false, as PyTorch's
// torch.backends.cuda.matmul.allow_tf32) allows TF32 (CUBLAS_COMPUTE_32F_FAST_TF32); bf16 and f16
// take their storage type in and out and accumulate in f32; f64 computes in f64. Deterministic: the
// same problem gives the same bits every time (see runGemm). The bias of linearForward is added by cuBLASLt's
// bias epilogue (f64: by a rank-1 GEMM first, cuBLASLt has no f64 epilogues); the bias gradient is a GEMM of
// the output gradient with a ones vector.
//
// Any strides whose matrices have a unit stride along one axis (transposed views included) go to
// cuBLASLt without a copy; other layouts are made contiguous first.
#include <utility>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

Tensor linearForward(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor linearBackwardData(const Tensor& gy, const Tensor& weight);
/// gx += gy W in one GEMM (beta 1) for a contiguous gx; false (nothing written) otherwise.
bool linearBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& weight);
std::pair<Tensor, Tensor> linearBackwardWeights(const Tensor& gy, const Tensor& x, bool with_bias);
/// Batched (broadcast batch dims; a batch dim broadcast along one operand costs no copy).
Tensor matmul(const Tensor& a, const Tensor& b);

/// kernels::linearResidualForward in one GEMM: residual read as cuBLASLt's C (beta 1), the bias in
/// the epilogue, D in residual's dtype (f32 beside a 16-bit product: x W^T + b + residual summed in
/// f32 and rounded once). Undefined where it does not take the problem: f64, a residual dtype other
/// than x's or f32, a non-contiguous residual, rows not whole 16-byte runs, or no algorithm.
Tensor linearResidualForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& residual);
/// kernels::linearGeluTanhForward in one GEMM, its bias and GELU in cuBLASLt's epilogue
/// (GELU_AUX_BIAS: z = x W^T + b rounded into the aux matrix, y = gelu_tanh(z) from z in f32).
/// Undefined tensors where the epilogues do not take the problem: f64 (cuBLASLt has no f64
/// epilogues), an empty or unaligned one (the padded copies of a large unaligned GEMM would need
/// the aux matrix padded too), or no algorithm for it.
std::pair<Tensor, Tensor> linearGeluTanhForward(const Tensor& x, const Tensor& weight, const Tensor& bias);
/// kernels::linearBackwardDataGeluTanh in one GEMM (DGELU_BGRAD: gy W times gelu'(z) from the
/// accumulator in f32, the bias gradient summed in the epilogue); undefined tensors as above.
std::pair<Tensor, Tensor> linearBackwardDataGeluTanh(const Tensor& gy, const Tensor& weight, const Tensor& z,
                                                     bool with_bias);

}  // namespace lockstep::kernels::cuda
