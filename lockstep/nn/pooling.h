#pragma once
// Pooling layers: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d (torch.nn equivalents). No parameters.
#include <array>
#include <cstdint>

#include "lockstep/autograd/ops/pool.h"
#include "lockstep/nn/module.h"

namespace lockstep::nn {

/// kernel, stride (0 = kernel), padding, ceil_mode, count_include_pad (avg only).
using Pool2dOptions = autograd::Pool2dOptions;

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dOptions& options = {});
  Variable forward(const Variable& x) override;
  std::string extraRepr() const override;
  const Pool2dOptions& options() const { return options_; }

 private:
  Pool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const Pool2dOptions& options = {});
  Variable forward(const Variable& x) override;
  std::string extraRepr() const override;
  const Pool2dOptions& options() const { return options_; }

 private:
  Pool2dOptions options_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::array<int64_t, 2> output_size = {1, 1});
  Variable forward(const Variable& x) override;
  std::string extraRepr() const override;
  std::array<int64_t, 2> outputSize() const { return output_size_; }

 private:
  std::array<int64_t, 2> output_size_;
};

}  // namespace lockstep::nn
