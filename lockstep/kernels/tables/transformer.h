#pragma once
// The transformer ops of kernels/transformer.h, as each backend provides them (see
// kernels/dispatch.h). The CPU entry points check embedding indices before the call.
#include "lockstep/kernels/transformer.h"

namespace lockstep::kernels {

struct TransformerKernels {
  static constexpr const char* kGroup = "transformer";
  Tensor (*embeddingForward)(const Tensor& weight, const Tensor& indices) = nullptr;
  Tensor (*embeddingBackward)(const Tensor& gy, const Tensor& indices, int64_t num_rows,
                              int64_t padding_idx) = nullptr;
  RmsNormOutput (*rmsNormForward)(const Tensor& x, const Tensor& weight, double eps) = nullptr;
  RmsNormGrads (*rmsNormBackward)(const Tensor& gy, const Tensor& x, const Tensor& rstd,
                                  const Tensor& weight) = nullptr;
  Tensor (*swigluForward)(const Tensor& gate, const Tensor& up) = nullptr;
  std::pair<Tensor, Tensor> (*swigluBackward)(const Tensor& gy, const Tensor& gate,
                                              const Tensor& up) = nullptr;
  Tensor (*rotaryForward)(const Tensor& x, const Tensor& cos, const Tensor& sin) = nullptr;
  Tensor (*rotaryBackward)(const Tensor& gy, const Tensor& cos, const Tensor& sin) = nullptr;
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
