#include "lockstep/kernels/scale.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/scale.h"

namespace lockstep::kernels {

namespace {
// In place, so no f32 emulation around the kernels: they widen low precision themselves.
const Backends<ScaleKernels> kBackends{.cpu = &cpu::kScale, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kScale)};
}  // namespace

void scaleInPlace(Tensor& x, double factor) {
  LOCKSTEP_ENFORCE(x.isDense() && isFloating(x.dtype()), ValueError,
                   "scaleInPlace: needs a dense floating tensor, got ", x.describe());
  dispatchAsIs<&ScaleKernels::scaleInPlace>(kBackends, x, x, factor);
}

}  // namespace lockstep::kernels
