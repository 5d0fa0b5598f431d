#pragma once
// In-place scaling (kernels/scale.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/scale.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_SCALE_OPS(X) \
  X(scaleInPlace, void(Tensor& x, double factor)) \
  X(scaleInPlaceBy, void(Tensor& x, const Tensor& factor))
// clang-format on

struct ScaleKernels {
  static constexpr const char* kGroup = "scale";
  LOCKSTEP_SCALE_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const ScaleKernels kScale;
}
namespace cuda {
extern const ScaleKernels kScale;
}

}  // namespace lockstep::kernels
