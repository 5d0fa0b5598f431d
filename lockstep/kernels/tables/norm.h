#pragma once
// The norms and clipping of kernels/norm.h, as each backend provides them (see kernels/dispatch.h).
// The entry points have checked the norm type and that the tensors share one device.
#include "lockstep/kernels/norm.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_NORM_OPS(X) \
  X(norm, double(const Tensor& x, double p)) \
  X(totalNorm, Tensor(const std::vector<Tensor>& xs, double p)) \
  X(scaleByClipCoefficient, void(const std::vector<Tensor>& xs, const Tensor& total, double max_norm))
// clang-format on

struct NormKernels {
  static constexpr const char* kGroup = "norm";
  LOCKSTEP_NORM_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const NormKernels kNorm;
}
namespace cuda {
extern const NormKernels kNorm;
}

}  // namespace lockstep::kernels
