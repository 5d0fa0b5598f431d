#pragma once
// LayerNorm (torch.nn.LayerNorm): normalises over the trailing dims given by normalized_shape, with
// learnable weight (1) and bias (0) of that shape when elementwise_affine.
#include "lockstep/nn/module.h"

namespace lockstep::nn {

struct LayerNormOptions {
  Shape normalized_shape{};
  double eps = 1e-5;
  bool elementwise_affine = true;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& options);
  Variable forward(const Variable& x) override;
  /// forward(x) for a reader that runs in autocast's lower precision (autograd::layerNormLowered):
  /// the same values that reader gets from forward(x), rounded without a cast of their own.
  Variable forwardLowered(const Variable& x);
  std::string extraRepr() const override;

  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  const LayerNormOptions& options() const { return options_; }

 private:
  LayerNormOptions options_;
  Variable weight_;
  Variable bias_;
};

}  // namespace lockstep::nn
