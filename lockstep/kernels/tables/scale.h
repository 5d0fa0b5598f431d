#pragma once
// In-place scaling (kernels/scale.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/scale.h"

namespace lockstep::kernels {

struct ScaleKernels {
  static constexpr const char* kGroup = "scale";
  void (*scaleInPlace)(Tensor& x, double factor) = nullptr;
};

namespace cpu {
extern const ScaleKernels kScale;
}
namespace cuda {
extern const ScaleKernels kScale;
}

}  // namespace lockstep::kernels
