#include "lockstep/nn/pooling.h"

namespace lockstep::nn {

namespace {
std::string poolRepr(const Pool2dOptions& o) {
  return detail::concat("kernel_size=(", o.kernel[0], ", ", o.kernel[1], "), stride=(",
                        o.stride[0] ? o.stride[0] : o.kernel[0], ", ",
                        o.stride[1] ? o.stride[1] : o.kernel[1], "), padding=(", o.padding[0], ", ",
                        o.padding[1], ")", o.ceil_mode ? ", ceil_mode=true" : "");
}
void checkPool(const Pool2dOptions& o, const char* what) {
  LOCKSTEP_ENFORCE(o.kernel[0] > 0 && o.kernel[1] > 0 && o.stride[0] >= 0 && o.stride[1] >= 0 &&
                       o.padding[0] >= 0 && o.padding[1] >= 0,
                   ValueError, what, ": kernel must be positive, stride and padding >= 0");
  LOCKSTEP_ENFORCE(2 * o.padding[0] <= o.kernel[0] && 2 * o.padding[1] <= o.kernel[1], ValueError, what,
                   ": padding should be at most half of the kernel size (PyTorch's rule)");
}
}  // namespace

MaxPool2d::MaxPool2d(const Pool2dOptions& options) : Module("MaxPool2d"), options_(options) {
  checkPool(options_, "MaxPool2d");
}
Variable MaxPool2d::forward(const Variable& x) { return autograd::maxPool2d(x, options_); }
std::string MaxPool2d::extraRepr() const { return poolRepr(options_); }

AvgPool2d::AvgPool2d(const Pool2dOptions& options) : Module("AvgPool2d"), options_(options) {
  checkPool(options_, "AvgPool2d");
}
Variable AvgPool2d::forward(const Variable& x) { return autograd::avgPool2d(x, options_); }
std::string AvgPool2d::extraRepr() const { return poolRepr(options_); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::array<int64_t, 2> output_size)
    : Module("AdaptiveAvgPool2d"), output_size_(output_size) {
  LOCKSTEP_ENFORCE(output_size[0] > 0 && output_size[1] > 0, ValueError,
                   "AdaptiveAvgPool2d: output size must be positive, got (", output_size[0], ", ",
                   output_size[1], ")");
}
Variable AdaptiveAvgPool2d::forward(const Variable& x) {
  return autograd::adaptiveAvgPool2d(x, output_size_);
}
std::string AdaptiveAvgPool2d::extraRepr() const {
  return detail::concat("output_size=(", output_size_[0], ", ", output_size_[1], ")");
}

}  // namespace lockstep::nn
