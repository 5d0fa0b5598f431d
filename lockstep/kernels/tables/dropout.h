#pragma once
// Dropout (kernels/dropout.h), as each backend provides it (see kernels/dispatch.h). The forward
// draws from gen's Philox stream and advances it by x.numel().
#include "lockstep/kernels/dropout.h"

namespace lockstep::kernels {

struct DropoutKernels {
  static constexpr const char* kGroup = "dropout";
  std::pair<Tensor, Tensor> (*dropoutForward)(const Tensor& x, double p, Generator& gen) = nullptr;
  Tensor (*dropoutBackward)(const Tensor& gy, const Tensor& mask, double p) = nullptr;
};

namespace cpu {
extern const DropoutKernels kDropout;
}
namespace reference {
extern const DropoutKernels kDropout;
}
namespace cuda {
extern const DropoutKernels kDropout;
}

}  // namespace lockstep::kernels
