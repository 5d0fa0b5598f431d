#pragma once
// linear layers and matmul (kernels/linear.h), as each backend provides them (see
// kernels/dispatch.h).
#include "lockstep/kernels/linear.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_LINEAR_OPS(X) \
  X(linearForward, Tensor(const Tensor& x, const Tensor& weight, const Tensor& bias)) \
  X(linearBackwardData, Tensor(const Tensor& gy, const Tensor& weight)) \
  X(linearBackwardWeights, std::pair<Tensor, Tensor>(const Tensor& gy, const Tensor& x, bool with_bias)) \
  X(matmul, Tensor(const Tensor& a, const Tensor& b))
// clang-format on

struct LinearKernels {
  static constexpr const char* kGroup = "linear";
  LOCKSTEP_LINEAR_OPS(LOCKSTEP_KERNEL_MEMBER)
};

// A linear layer with an activation (or a residual add) in the GEMM's epilogue: only a GPU has them
// (cuBLASLt), and
// its kernels return undefined tensors for a problem cuBLASLt's epilogues do not take;
// kernels/linear.cpp then composes the plain ops.
// clang-format off
#define LOCKSTEP_LINEAR_EPILOGUE_OPS(X) \
  X(linearGeluTanhForward, std::pair<Tensor, Tensor>(const Tensor& x, const Tensor& weight, const Tensor& bias)) \
  X(linearBackwardDataGeluTanh, std::pair<Tensor, Tensor>(const Tensor& gy, const Tensor& weight, const Tensor& z, bool with_bias)) \
  X(linearResidualForward, Tensor(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual))
// clang-format on

struct LinearEpilogueKernels {
  static constexpr const char* kGroup = "linear with an activation";
  LOCKSTEP_LINEAR_EPILOGUE_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const LinearKernels kLinear;
}
namespace reference {
extern const LinearKernels kLinear;
}
namespace cuda {
extern const LinearKernels kLinear;
extern const LinearEpilogueKernels kLinearEpilogue;
}  // namespace cuda

}  // namespace lockstep::kernels
