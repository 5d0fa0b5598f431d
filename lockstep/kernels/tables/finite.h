#pragma once
// The non-finite checks of kernels/finite.h, as each backend provides them (see kernels/dispatch.h).
// scaleAndCheck multiplies x by factor first when scale is set, and answers whether x holds an inf
// or a nan; scaleAndCheckInto sets found_inf (one f32 element, where x lives) to 1 instead.
#include "lockstep/kernels/finite.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_FINITE_OPS(X) \
  X(scaleAndCheck, bool(Tensor& x, double factor, bool scale)) \
  X(scaleAndCheckInto, void(Tensor& x, double factor, Tensor& found_inf))
// clang-format on

struct FiniteKernels {
  static constexpr const char* kGroup = "finite";
  LOCKSTEP_FINITE_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const FiniteKernels kFinite;
}
namespace cuda {
extern const FiniteKernels kFinite;
}

}  // namespace lockstep::kernels
