#include "lockstep/nn/conv2d.h"

#include <cmath>

#include "lockstep/autograd/ops/conv.h"
#include "lockstep/nn/init.h"

namespace lockstep::nn {

Conv2d::Conv2d(const Conv2dOptions& options) : Module("Conv2d"), options_(options) {
  const auto& o = options;
  LOCKSTEP_ENFORCE(o.in_channels > 0 && o.out_channels > 0 && o.groups > 0, ValueError,
                   "Conv2d: in_channels, out_channels and groups must be positive, got ", o.in_channels, ", ",
                   o.out_channels, ", ", o.groups);
  LOCKSTEP_ENFORCE(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, ValueError,
                   "Conv2d: in_channels (", o.in_channels, ") and out_channels (", o.out_channels,
                   ") must be divisible by groups (", o.groups, ")");
  LOCKSTEP_ENFORCE(o.kernel_size[0] > 0 && o.kernel_size[1] > 0 && o.stride[0] > 0 && o.stride[1] > 0 &&
                       o.dilation[0] > 0 && o.dilation[1] > 0 && o.padding[0] >= 0 && o.padding[1] >= 0,
                   ValueError, "Conv2d: kernel_size, stride and dilation must be positive and padding >= 0");
  Generator& gen = o.generator ? *o.generator : defaultGenerator();
  Tensor w = Tensor::empty({o.out_channels, o.in_channels / o.groups, o.kernel_size[0], o.kernel_size[1]});
  init::kaimingUniform(w, std::sqrt(5.0), init::FanMode::fan_in, "leaky_relu", gen);
  weight_ = registerParameter("weight", w);
  if (o.bias) {
    Tensor b = Tensor::empty({o.out_channels});
    const double bound = init::defaultBound(init::computeFans(w.shape()).first);
    init::uniform(b, -bound, bound, gen);
    bias_ = registerParameter("bias", b);
  }
}

autograd::Conv2dOptions Conv2d::functionalOptions() const {
  autograd::Conv2dOptions o;
  o.stride = options_.stride;
  o.padding = options_.padding;
  o.dilation = options_.dilation;
  o.groups = options_.groups;
  o.fuse_relu = options_.fuse_relu;
  return o;
}

Variable Conv2d::forward(const Variable& x) {
  return autograd::conv2d(x, weight_, bias_, functionalOptions());
}

std::string Conv2d::extraRepr() const {
  const auto& o = options_;
  return detail::concat(o.in_channels, ", ", o.out_channels, ", kernel_size=(", o.kernel_size[0], ", ",
                        o.kernel_size[1], "), stride=(", o.stride[0], ", ", o.stride[1], "), padding=(",
                        o.padding[0], ", ", o.padding[1], ")",
                        o.groups != 1 ? detail::concat(", groups=", o.groups) : "",
                        o.bias ? "" : ", bias=false", o.fuse_relu ? ", fuse_relu=true" : "");
}

}  // namespace lockstep::nn
