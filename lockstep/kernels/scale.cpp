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

void scaleInPlace(Tensor& x, const Tensor& factor) {
  LOCKSTEP_ENFORCE(x.isDense() && isFloating(x.dtype()), ValueError,
                   "scaleInPlace: needs a dense floating tensor, got ", x.describe());
  LOCKSTEP_ENFORCE(factor.numel() == 1 && isFloating(factor.dtype()) && factor.device() == x.device(),
                   ValueError, "scaleInPlace: the factor must be one floating element on ",
                   deviceName(x.device()), ", got ", factor.describe());
  // A GPU reads the factor in every block while others write x.
  LOCKSTEP_ENFORCE(!factor.sharesStorage(x), ValueError,
                   "scaleInPlace: the factor must not be part of the tensor it scales, got ",
                   factor.describe());
  dispatchAsIs<&ScaleKernels::scaleInPlaceBy>(kBackends, x, x, factor);
}

}  // namespace lockstep::kernels
