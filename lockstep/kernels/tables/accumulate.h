#pragma once
// In-place accumulation (kernels/accumulate.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/accumulate.h"

namespace lockstep::kernels {

struct AccumulateKernels {
  static constexpr const char* kGroup = "addInto";
  void (*addInto)(Tensor& dst, const Tensor& src, double alpha) = nullptr;
};

namespace cpu {
extern const AccumulateKernels kAccumulate;
}
namespace cuda {
extern const AccumulateKernels kAccumulate;
}

}  // namespace lockstep::kernels
