#pragma once
// The norms and clipping of kernels/norm.h, as each backend provides them (see kernels/dispatch.h).
// The entry points have checked the norm type and that the tensors share one device.
#include "lockstep/kernels/norm.h"

namespace lockstep::kernels {

struct NormKernels {
  static constexpr const char* kGroup = "norm";
  double (*norm)(const Tensor& x, double p) = nullptr;
  Tensor (*totalNorm)(const std::vector<Tensor>& xs, double p) = nullptr;
  void (*scaleByClipCoefficient)(const std::vector<Tensor>& xs, const Tensor& total,
                                 double max_norm) = nullptr;
};

namespace cpu {
extern const NormKernels kNorm;
}
namespace cuda {
extern const NormKernels kNorm;
}

}  // namespace lockstep::kernels
