#include "lockstep/nn/layer_norm.h"

#include "lockstep/autograd/ops/layer_norm.h"

namespace lockstep::nn {

LayerNorm::LayerNorm(const LayerNormOptions& options) : Module("LayerNorm"), options_(options) {
  LOCKSTEP_ENFORCE(!options.normalized_shape.empty(), ValueError,
                   "LayerNorm: normalized_shape must not be empty");
  if (options.elementwise_affine) {
    weight_ = registerParameter("weight", Tensor::ones(options.normalized_shape));
    bias_ = registerParameter("bias", Tensor::zeros(options.normalized_shape));
  }
}

Variable LayerNorm::forward(const Variable& x) {
  return autograd::layerNorm(x, options_.normalized_shape, weight_, bias_, options_.eps);
}

Variable LayerNorm::forwardLowered(const Variable& x) {
  return autograd::layerNormLowered(x, options_.normalized_shape, weight_, bias_, options_.eps);
}

std::string LayerNorm::extraRepr() const {
  return detail::concat(shapeToString(options_.normalized_shape), ", eps=", options_.eps,
                        ", elementwise_affine=", options_.elementwise_affine ? "true" : "false");
}

}  // namespace lockstep::nn
