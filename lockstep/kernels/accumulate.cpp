#include "lockstep/kernels/accumulate.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/linear.h"
#include "lockstep/kernels/tables/accumulate.h"

namespace lockstep::kernels {

namespace {
// The kernels take every dtype as it is (the cpu loops accumulate low precision in f32).
const Backends<AccumulateKernels> kBackends{.cpu = &cpu::kAccumulate,
                                            .cuda = LOCKSTEP_CUDA_TABLE(cuda::kAccumulate)};

// The fused forms: the CUDA backend's, or none (a build without CUDA).
const GradIntoKernels* gpuInto() { return LOCKSTEP_CUDA_TABLE(cuda::kGradInto); }

// Whether gx can take t's gradient on t's device in t's dtype.
bool fits(const Tensor& gx, const Tensor& t) {
  return gx.defined() && gx.isCuda() && gx.device() == t.device() && gx.shape() == t.shape() &&
         gx.dtype() == t.dtype();
}
}  // namespace

void addInto(Tensor& dst, const Tensor& src, double alpha) {
  LOCKSTEP_ENFORCE(dst.shape() == src.shape(), ValueError, "addInto: destination shape ",
                   shapeToString(dst.shape()), " differs from source shape ", shapeToString(src.shape()));
  dispatchAsIs<&AccumulateKernels::addInto>(kBackends, {dst.isCuda() || src.isCuda(), dst.dtype()}, dst, src,
                                            alpha);
}

bool conv2dBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& weight,
                            const Conv2dParams& p) {
  checkConv2dBackwardData(gy, x, weight, p);
  if (!fits(gx, x) || gy.dtype() != x.dtype() || !gy.isCuda() || !weight.isCuda() || !gpuInto()) return false;
  return gpuInto()->conv2dBackwardDataInto(gx, gy, x, weight, p);
}

bool linearBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& weight) {
  const Shape xs = checkLinearBackwardData(gy, weight);
  if (!gx.defined() || !gx.isCuda() || gx.shape() != xs || gx.dtype() != gy.dtype() ||
      weight.dtype() != gy.dtype() || gx.device() != gy.device() || weight.device() != gy.device() ||
      !gpuInto())
    return false;
  return gpuInto()->linearBackwardDataInto(gx, gy, weight);
}

std::optional<LayerNormGrads> layerNormBackwardInto(Tensor& gx, const Tensor& gy, const Tensor& x,
                                                    const Tensor& mean, const Tensor& variance,
                                                    const Shape& normalized_shape, const Tensor& weight,
                                                    const Tensor& bias, double eps) {
  checkLayerNormBackward(gy, x, normalized_shape, weight, bias);
  if (!fits(gx, x) || !gpuInto()) return std::nullopt;
  return gpuInto()->layerNormBackwardInto(gx, gy, x, mean, variance, normalized_shape, weight, bias, eps);
}

std::optional<RmsNormGrads> rmsNormBackwardInto(Tensor& gx, const Tensor& gy, const Tensor& x,
                                                const Tensor& rstd, const Tensor& weight) {
  checkRmsNormBackward(gy, x, weight);
  if (!fits(gx, x) || !gpuInto()) return std::nullopt;
  return gpuInto()->rmsNormBackwardInto(gx, gy, x, rstd, weight);
}

}  // namespace lockstep::kernels
