#pragma once
// The non-finite checks of kernels/finite.h, as each backend provides them (see kernels/dispatch.h).
// scaleAndCheck multiplies x by factor first when scale is set, and answers whether x holds an inf
// or a nan; scaleAndCheckInto sets found_inf (one f32 element, where x lives) to 1 instead.
#include "lockstep/kernels/finite.h"

namespace lockstep::kernels {

struct FiniteKernels {
  static constexpr const char* kGroup = "finite";
  bool (*scaleAndCheck)(Tensor& x, double factor, bool scale) = nullptr;
  void (*scaleAndCheckInto)(Tensor& x, double factor, Tensor& found_inf) = nullptr;
};

namespace cpu {
extern const FiniteKernels kFinite;
}
namespace cuda {
extern const FiniteKernels kFinite;
}

}  // namespace lockstep::kernels
