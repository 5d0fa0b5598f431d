#pragma once
// Scaled dot-product attention (kernels/attention.h), as each backend provides it (see
// kernels/dispatch.h).
#include "lockstep/kernels/attention.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_ATTENTION_OPS(X) \
  X(attentionForward, AttentionOutput(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p)) \
  X(attentionBackward, AttentionGrads(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const AttentionParams& p))
// The backward written into the caller's gradients, where a backend can (a GPU's cuDNN): false
// when it did not run.
#define LOCKSTEP_ATTENTION_INTO_OPS(X) \
  X(attentionBackwardInto, bool(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const AttentionParams& p, const AttentionGrads& into))
// clang-format on

struct AttentionKernels {
  static constexpr const char* kGroup = "scaled_dot_product_attention";
  LOCKSTEP_ATTENTION_OPS(LOCKSTEP_KERNEL_MEMBER)
};

struct AttentionIntoKernels {
  static constexpr const char* kGroup = "scaled_dot_product_attention into given gradients";
  LOCKSTEP_ATTENTION_INTO_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const AttentionKernels kAttention;
}
namespace reference {
extern const AttentionKernels kAttention;
}
namespace cuda {
extern const AttentionKernels kAttention;
extern const AttentionIntoKernels kAttentionInto;
}  // namespace cuda

}  // namespace lockstep::kernels
