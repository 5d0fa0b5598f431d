#pragma once
// Scaled dot-product attention (kernels/attention.h), as each backend provides it (see
// kernels/dispatch.h).
#include "lockstep/kernels/attention.h"

namespace lockstep::kernels {

struct AttentionKernels {
  static constexpr const char* kGroup = "scaled_dot_product_attention";
  AttentionOutput (*attentionForward)(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionParams& p) = nullptr;
  AttentionGrads (*attentionBackward)(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& out, const Tensor& lse,
                                      const AttentionParams& p) = nullptr;
};

namespace cpu {
extern const AttentionKernels kAttention;
}
namespace reference {
extern const AttentionKernels kAttention;
}
namespace cuda {
extern const AttentionKernels kAttention;
}

}  // namespace lockstep::kernels
