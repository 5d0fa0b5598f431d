#pragma once
// In-place accumulation (kernels/accumulate.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_ACCUMULATE_OPS(X) \
  X(addInto, void(Tensor& dst, const Tensor& src, double alpha))
// clang-format on

struct AccumulateKernels {
  static constexpr const char* kGroup = "addInto";
  LOCKSTEP_ACCUMULATE_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const AccumulateKernels kAccumulate;
}
namespace cuda {
extern const AccumulateKernels kAccumulate;
}

}  // namespace lockstep::kernels
