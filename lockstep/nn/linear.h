#pragma once
// Linear: y = x W^T + b (torch.nn.Linear), weight [out, in], bias [out].
#include <cstdint>

#include "lockstep/nn/module.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::nn {

struct LinearOptions {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
  /// Source of the initial values, borrowed during construction only; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

class Linear : public Module {
 public:
  /// Weight and bias U(-1/sqrt(in), 1/sqrt(in)) drawn in that order, exactly PyTorch's
  /// reset_parameters() (kaiming_uniform_(a=sqrt(5)) for the weight).
  explicit Linear(const LinearOptions& options);
  Variable forward(const Variable& x) override;
  /// residual + forward(x) as one op (autograd::linearResidual: on a GPU the add runs in the GEMM):
  /// a transformer block's projection back into its residual stream.
  Variable forwardResidual(const Variable& x, const Variable& residual);
  std::string extraRepr() const override;

  const Variable& weight() const { return weight_; }
  /// Undefined when options.bias is false.
  const Variable& bias() const { return bias_; }
  const LinearOptions& options() const { return options_; }

 private:
  LinearOptions options_;
  Variable weight_;
  Variable bias_;
};

}  // namespace lockstep::nn
