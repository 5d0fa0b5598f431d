#pragma once
// concatenation (kernels/shape.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/shape.h"

namespace lockstep::kernels {

struct ShapeKernels {
  static constexpr const char* kGroup = "shape";
  Tensor (*concat)(const std::vector<Tensor>& xs, int64_t dim) = nullptr;
};

namespace onednn {
extern const ShapeKernels kShape;
}
namespace reference {
extern const ShapeKernels kShape;
}
namespace cuda {
extern const ShapeKernels kShape;
}

}  // namespace lockstep::kernels
