#pragma once
// The transformer ops of kernels/transformer.h, as each backend provides them (see
// kernels/dispatch.h). The CPU entry points check embedding indices before the call.
#include "lockstep/kernels/tables/table.h"
#include "lockstep/kernels/transformer.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_TRANSFORMER_OPS(X) \
  X(embeddingForward, Tensor(const Tensor& weight, const Tensor& indices)) \
  X(embeddingBackward, Tensor(const Tensor& gy, const Tensor& indices, int64_t num_rows, int64_t padding_idx)) \
  X(rmsNormForward, RmsNormOutput(const Tensor& x, const Tensor& weight, double eps, DType y_dtype)) \
  X(rmsNormBackward, RmsNormGrads(const Tensor& gy, const Tensor& x, const Tensor& rstd, const Tensor& weight)) \
  X(swigluForward, Tensor(const Tensor& gate, const Tensor& up)) \
  X(swigluBackward, std::pair<Tensor, Tensor>(const Tensor& gy, const Tensor& gate, const Tensor& up)) \
  X(rotaryForward, Tensor(const Tensor& x, const Tensor& cos, const Tensor& sin)) \
  X(rotaryBackward, Tensor(const Tensor& gy, const Tensor& cos, const Tensor& sin))
// clang-format on

struct TransformerKernels {
  static constexpr const char* kGroup = "transformer";
  LOCKSTEP_TRANSFORMER_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const TransformerKernels kTransformer;
}
namespace reference {
extern const TransformerKernels kTransformer;
}
namespace cuda {
extern const TransformerKernels kTransformer;
}

}  // namespace lockstep::kernels
