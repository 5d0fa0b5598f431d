#pragma once
// linear layers and matmul (kernels/linear.h), as each backend provides them (see
// kernels/dispatch.h).
#include "lockstep/kernels/linear.h"

namespace lockstep::kernels {

struct LinearKernels {
  static constexpr const char* kGroup = "linear";
  Tensor (*linearForward)(const Tensor& x, const Tensor& weight, const Tensor& bias) = nullptr;
  Tensor (*linearBackwardData)(const Tensor& gy, const Tensor& weight) = nullptr;
  std::pair<Tensor, Tensor> (*linearBackwardWeights)(const Tensor& gy, const Tensor& x,
                                                     bool with_bias) = nullptr;
  Tensor (*matmul)(const Tensor& a, const Tensor& b) = nullptr;
};

namespace onednn {
extern const LinearKernels kLinear;
}
namespace reference {
extern const LinearKernels kLinear;
}
namespace cuda {
extern const LinearKernels kLinear;
}

}  // namespace lockstep::kernels
