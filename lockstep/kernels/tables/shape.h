#pragma once
// concatenation (kernels/shape.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/shape.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_SHAPE_OPS(X) \
  X(concat, Tensor(const std::vector<Tensor>& xs, int64_t dim))
// clang-format on

struct ShapeKernels {
  static constexpr const char* kGroup = "shape";
  LOCKSTEP_SHAPE_OPS(LOCKSTEP_KERNEL_MEMBER)
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
