#pragma once
// RMSNorm (torch.nn.RMSNorm, Llama's LlamaRMSNorm): x / sqrt(mean(x^2 over the last dim) + eps) *
// weight, weight [dim] starting at 1.
#include <cstdint>

#include "lockstep/nn/module.h"

namespace lockstep::nn {

struct RMSNormOptions {
  int64_t dim = 0;
  double eps = 1e-6;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(const RMSNormOptions& options);
  Variable forward(const Variable& x) override;
  /// forward(x) for readers that run in autocast's lower precision (autograd::rmsNormLowered).
  Variable forwardLowered(const Variable& x);
  std::string extraRepr() const override;
  const Variable& weight() const { return weight_; }

 private:
  RMSNormOptions options_;
  Variable weight_;
};

}  // namespace lockstep::nn
