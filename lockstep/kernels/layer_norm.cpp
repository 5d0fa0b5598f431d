#include "lockstep/kernels/layer_norm.h"

#include "lockstep/kernels/cuda/layer_norm.h"
#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

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

LayerNormOutput layerNormForward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps) {
  const int64_t n = checkLayerNorm(x, normalized_shape, weight, bias);
  LOCKSTEP_ON_CUDA(x, cuda::layerNormForward(x, n, weight, bias, eps));
  return dispatch<onednn::layerNormForward, reference::layerNormForward>(x.dtype(), x, normalized_shape,
                                                                         weight, bias, eps);
}

LayerNormGrads layerNormBackward(const Tensor& gy, const Tensor& x, const Tensor& mean,
                                 const Tensor& variance, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps) {
  const int64_t n = checkLayerNorm(x, normalized_shape, weight, bias);
  LOCKSTEP_ENFORCE(gy.shape() == x.shape(), ValueError, "layer_norm backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from input shape ", shapeToString(x.shape()));
  LOCKSTEP_ON_CUDA(x, cuda::layerNormBackward(gy, x, mean, variance, n, weight, bias, eps));
  return dispatch<onednn::layerNormBackward, reference::layerNormBackward>(
      x.dtype(), gy, x, mean, variance, normalized_shape, weight, bias, eps);
}

}  // namespace lockstep::kernels
