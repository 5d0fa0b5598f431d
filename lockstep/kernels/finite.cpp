#include "lockstep/kernels/finite.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/finite.h"

namespace lockstep::kernels {

namespace {
// The kernels check f32 and f64 tensors as they are, bf16 and f16 through f32 (scaled there).
const Backends<FiniteKernels> kBackends{.cpu = &cpu::kFinite, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kFinite)};
}  // namespace

bool hasNonFinite(const Tensor& x) {
  Tensor view = x;  // shares storage; only read
  return dispatchAsIs<&FiniteKernels::scaleAndCheck>(kBackends, x, view, 1.0, false);
}

bool scaleAndCheckNonFinite(Tensor& x, double factor) {
  return dispatchAsIs<&FiniteKernels::scaleAndCheck>(kBackends, x, x, factor, true);
}

void scaleAndCheckNonFiniteInto(Tensor& x, double factor, Tensor& found_inf) {
  dispatchAsIs<&FiniteKernels::scaleAndCheckInto>(kBackends, {x.isCuda() || found_inf.isCuda(), x.dtype()}, x,
                                                  factor, found_inf);
}

}  // namespace lockstep::kernels
