#include "lockstep/nn/rms_norm.h"

#include "lockstep/autograd/ops/rms_norm.h"

namespace lockstep::nn {

RMSNorm::RMSNorm(const RMSNormOptions& options) : Module("RMSNorm"), options_(options) {
  LOCKSTEP_ENFORCE(options.dim > 0, ValueError, "RMSNorm: dim must be positive, got ", options.dim);
  weight_ = registerParameter("weight", Tensor::ones({options.dim}));
}

Variable RMSNorm::forward(const Variable& x) { return autograd::rmsNorm(x, weight_, options_.eps); }

Variable RMSNorm::forwardLowered(const Variable& x) {
  return autograd::rmsNormLowered(x, weight_, options_.eps);
}

std::string RMSNorm::extraRepr() const { return detail::concat("(", options_.dim, ",), eps=", options_.eps); }

}  // namespace lockstep::nn
