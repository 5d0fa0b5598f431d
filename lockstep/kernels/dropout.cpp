#include "lockstep/kernels/dropout.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/dropout.h"

namespace lockstep::kernels {

namespace {

// Low precision computes as f32 does (the cpu loops widen it block by block): the same draws as
// f32, and the kept values scale exactly as f32 does before they are rounded.
const Backends<DropoutKernels> kBackends{.cpu = &cpu::kDropout,
                                         .reference = &reference::kDropout,
                                         .cuda = LOCKSTEP_CUDA_TABLE(cuda::kDropout),
                                         .cpu_takes_low_precision = true};

void checkP(double p) {
  LOCKSTEP_ENFORCE(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability must be in [0, 1], got ", p);
}

}  // namespace

std::pair<Tensor, Tensor> dropoutForward(const Tensor& x, double p, Generator& gen) {
  checkP(p);
  LOCKSTEP_ENFORCE(isFloating(x.dtype()), ValueError, "dropout: needs a floating tensor, got ", x.describe());
  return dispatch<&DropoutKernels::dropoutForward>(kBackends, x, x, p, gen);
}

Tensor dropoutBackward(const Tensor& gy, const Tensor& mask, double p) {
  checkP(p);
  LOCKSTEP_ENFORCE(gy.shape() == mask.shape() && mask.dtype() == DType::u8, ValueError,
                   "dropout backward: gradient ", gy.describe(), " does not match mask ", mask.describe());
  return dispatch<&DropoutKernels::dropoutBackward>(kBackends, {gy.isCuda() || mask.isCuda(), gy.dtype()}, gy,
                                                    mask, p);
}

}  // namespace lockstep::kernels
