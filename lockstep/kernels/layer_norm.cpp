#include "lockstep/kernels/layer_norm.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/layer_norm.h"

namespace lockstep::kernels {

namespace {
const Backends<LayerNormKernels> kBackends{.onednn = &onednn::kLayerNorm,
                                           .reference = &reference::kLayerNorm,
                                           .cuda = LOCKSTEP_CUDA_TABLE(cuda::kLayerNorm)};
}  // namespace

int64_t checkLayerNorm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias) {
  LOCKSTEP_ENFORCE(x.defined(), ValueError, "layer_norm: undefined input");
  const size_t k = normalized_shape.size();
  bool ok = k > 0 && k <= static_cast<size_t>(x.dim());
  for (size_t i = 0; ok && i < k; ++i) ok = x.shape()[x.dim() - k + i] == normalized_shape[i];
  LOCKSTEP_ENFORCE(ok, ValueError, "layer_norm: normalized_shape ", shapeToString(normalized_shape),
                   " is not a non-empty suffix of the input shape ", shapeToString(x.shape()));
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    const char* what = p == &weight ? "weight" : "bias";
    LOCKSTEP_ENFORCE(p->shape() == normalized_shape, ValueError, "layer_norm: ", what, " of shape ",
                     shapeToString(p->shape()), " does not match normalized_shape ",
                     shapeToString(normalized_shape));
    LOCKSTEP_ENFORCE(p->dtype() == x.dtype(), ValueError, "layer_norm: ", what, " has dtype ",
                     dtypeName(p->dtype()), " but the input has dtype ", dtypeName(x.dtype()));
  }
  return shapeNumel(normalized_shape);
}

void checkLayerNormBackward(const Tensor& gy, const Tensor& x, const Shape& normalized_shape,
                            const Tensor& weight, const Tensor& bias) {
  checkLayerNorm(x, normalized_shape, weight, bias);
  LOCKSTEP_ENFORCE(gy.shape() == x.shape(), ValueError, "layer_norm backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from input shape ", shapeToString(x.shape()));
  LOCKSTEP_ENFORCE(isFloating(gy.dtype()), ValueError, "layer_norm backward: gradient ", gy.describe(),
                   " is not floating");
}

LayerNormOutput layerNormForward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps, std::optional<DType> y_dtype) {
  checkLayerNorm(x, normalized_shape, weight, bias);
  const DType yt = y_dtype.value_or(x.dtype());
  LOCKSTEP_ENFORCE(isFloating(yt), ValueError, "layer_norm: the output dtype must be floating, got ",
                   dtypeName(yt));
  LayerNormOutput r =
      dispatch<&LayerNormKernels::layerNormForward>(kBackends, x, x, normalized_shape, weight, bias, eps, yt);
  if (r.y.dtype() != yt) r.y = r.y.to(yt);  // a backend that writes x's dtype only
  return r;
}

LayerNormGrads layerNormBackward(const Tensor& gy, const Tensor& x, const Tensor& mean,
                                 const Tensor& variance, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps) {
  checkLayerNormBackward(gy, x, normalized_shape, weight, bias);
  // The CPU kernels take gy in x's dtype; a GPU reads it as it is.
  const Tensor g = gy.dtype() == x.dtype() || x.isCuda() ? gy : gy.to(x.dtype());
  return dispatch<&LayerNormKernels::layerNormBackward>(kBackends, x, g, x, mean, variance, normalized_shape,
                                                        weight, bias, eps);
}

}  // namespace lockstep::kernels
