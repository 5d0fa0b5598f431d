#pragma once
// Conv2d: 2-d convolution (torch.nn.Conv2d) with zero padding. Input [N, C, H, W] in either memory
// format (channels_last is the fast one for oneDNN); the output keeps the input's format.
#include <array>
#include <cstdint>

#include "lockstep/autograd/ops/conv.h"
#include "lockstep/nn/module.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::nn {

struct Conv2dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  std::array<int64_t, 2> kernel_size{3, 3};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
  /// forward() computes relu(conv(x) + b) as one op: one graph node, the relu in place on the
  /// convolution's output (on a GPU in its bias pass).
  bool fuse_relu = false;
  /// Source of the initial values, borrowed during construction only; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

class Conv2d : public Module {
 public:
  /// weight [out, in/groups, kH, kW] and bias [out], both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
  /// fan_in = in/groups * kH * kW, drawn weight first: PyTorch's reset_parameters().
  explicit Conv2d(const Conv2dOptions& options);
  Variable forward(const Variable& x) override;
  std::string extraRepr() const override;

  const Variable& weight() const { return weight_; }
  /// Undefined when options.bias is false.
  const Variable& bias() const { return bias_; }
  const Conv2dOptions& options() const { return options_; }
  /// The options of the functional op forward() calls (autograd::conv2d).
  autograd::Conv2dOptions functionalOptions() const;

 private:
  Conv2dOptions options_;
  Variable weight_;
  Variable bias_;
};

}  // namespace lockstep::nn
