#include "lockstep/nn/activation.h"

#include "lockstep/autograd/ops/activation.h"
#include "lockstep/autograd/ops/shape.h"

namespace lockstep::nn {

Variable ReLU::forward(const Variable& x) { return autograd::relu(x); }

Variable LeakyReLU::forward(const Variable& x) { return autograd::leakyRelu(x, negative_slope_); }
std::string LeakyReLU::extraRepr() const { return detail::concat("negative_slope=", negative_slope_); }

Variable GELU::forward(const Variable& x) { return autograd::gelu(x); }

Variable Tanh::forward(const Variable& x) { return autograd::tanh(x); }

Variable Sigmoid::forward(const Variable& x) { return autograd::sigmoid(x); }

Variable Flatten::forward(const Variable& x) { return autograd::flatten(x, start_dim_, end_dim_); }
std::string Flatten::extraRepr() const {
  return detail::concat("start_dim=", start_dim_, ", end_dim=", end_dim_);
}

}  // namespace lockstep::nn
