#include "lockstep/kernels/accumulate.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/accumulate.h"

namespace lockstep::kernels {

namespace {
// The kernels take every dtype as it is (the cpu loops accumulate low precision in f32).
const Backends<AccumulateKernels> kBackends{.cpu = &cpu::kAccumulate,
                                            .cuda = LOCKSTEP_CUDA_TABLE(cuda::kAccumulate)};
}  // namespace

void addInto(Tensor& dst, const Tensor& src, double alpha) {
  LOCKSTEP_ENFORCE(dst.shape() == src.shape(), ValueError, "addInto: destination shape ",
                   shapeToString(dst.shape()), " differs from source shape ", shapeToString(src.shape()));
  dispatchAsIs<&AccumulateKernels::addInto>(kBackends, {dst.isCuda() || src.isCuda(), dst.dtype()}, dst, src,
                                            alpha);
}

}  // namespace lockstep::kernels
