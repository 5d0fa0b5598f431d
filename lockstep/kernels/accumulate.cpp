#include "lockstep/kernels/accumulate.h"

#include "lockstep/kernels/dispatch.h"
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
  const Shape out = checkConv2d(x, weight, Tensor(), p);
  LOCKSTEP_ENFORCE(gy.shape() == out, ValueError, "conv2d backward: gradient ", shapeToString(gy.shape()),
                   " differs from the output shape ", shapeToString(out));
  if (!fits(gx, x) || gy.dtype() != x.dtype() || !gy.isCuda() || !weight.isCuda() || !gpuInto()) return false;
  return gpuInto()->conv2dBackwardDataInto(gx, gy, x, weight, p);
}

bool linearBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& weight) {
  LOCKSTEP_ENFORCE(weight.dim() == 2 && gy.dim() >= 1 && gy.size(gy.dim() - 1) == weight.size(0), ValueError,
                   "linear backward: gradient ", shapeToString(gy.shape()),
                   " does not end in out_features of weight ", shapeToString(weight.shape()));
  Shape xs(gy.shape().begin(), gy.shape().end() - 1);
  xs.push_back(weight.size(1));
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
  checkLayerNorm(x, normalized_shape, weight, bias);
  LOCKSTEP_ENFORCE(gy.shape() == x.shape(), ValueError, "layer_norm backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from input shape ", shapeToString(x.shape()));
  if (!fits(gx, x) || !isFloating(gy.dtype()) || !gpuInto()) return std::nullopt;
  return gpuInto()->layerNormBackwardInto(gx, gy, x, mean, variance, normalized_shape, weight, bias, eps);
}

std::optional<RmsNormGrads> rmsNormBackwardInto(Tensor& gx, const Tensor& gy, const Tensor& x,
                                                const Tensor& rstd, const Tensor& weight) {
  checkRmsNorm(x, weight);
  LOCKSTEP_ENFORCE(gy.shape() == x.shape(), ValueError, "rms_norm backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from input shape ", shapeToString(x.shape()));
  if (!fits(gx, x) || !isFloating(gy.dtype()) || !gpuInto()) return std::nullopt;
  return gpuInto()->rmsNormBackwardInto(gx, gy, x, rstd, weight);
}

}  // namespace lockstep::kernels
