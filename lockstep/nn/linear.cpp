#include "lockstep/nn/linear.h"

#include <cmath>

#include "lockstep/autograd/ops/linear.h"
#include "lockstep/nn/init.h"

namespace lockstep::nn {

Linear::Linear(const LinearOptions& options) : Module("Linear"), options_(options) {
  LOCKSTEP_ENFORCE(options.in_features >= 0 && options.out_features > 0, ValueError,
                   "Linear: in_features must be >= 0 and out_features > 0, got ", options.in_features,
                   " and ", options.out_features);
  Generator& gen = options.generator ? *options.generator : defaultGenerator();
  Tensor w = Tensor::empty({options.out_features, options.in_features});
  if (w.numel() > 0) init::kaimingUniform(w, std::sqrt(5.0), init::FanMode::fan_in, "leaky_relu", gen);
  weight_ = registerParameter("weight", w);
  if (options.bias) {
    Tensor b = Tensor::empty({options.out_features});
    const double bound = init::defaultBound(options.in_features);
    init::uniform(b, -bound, bound, gen);
    bias_ = registerParameter("bias", b);
  }
}

Variable Linear::forward(const Variable& x) { return autograd::linear(x, weight_, bias_); }

Variable Linear::forwardResidual(const Variable& x, const Variable& residual) {
  return autograd::linearResidual(residual, x, weight_, bias_);
}

std::string Linear::extraRepr() const {
  return detail::concat("in_features=", options_.in_features, ", out_features=", options_.out_features,
                        ", bias=", options_.bias ? "true" : "false");
}

}  // namespace lockstep::nn
