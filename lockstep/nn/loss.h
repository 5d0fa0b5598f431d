#pragma once
// Loss modules: CrossEntropyLoss (on logits), NLLLoss (on log-probabilities), MSELoss. They take
// (input, target) rather than one input; the single-argument forward() is not supported.
#include <cstdint>

#include "lockstep/autograd/ops/loss.h"
#include "lockstep/nn/module.h"

namespace lockstep::nn {

using autograd::CrossEntropyOptions;
using autograd::Reduction;

class Loss : public Module {
 public:
  using Module::forward;
  using Module::operator();
  /// The loss of input against target (a plain tensor: no gradient flows to it).
  virtual Variable forward(const Variable& input, const Tensor& target) = 0;
  Variable operator()(const Variable& input, const Tensor& target) { return forward(input, target); }

 protected:
  explicit Loss(std::string type_name) : Module(std::move(type_name)) {}
};

/// logits [N, C], target [N] i64 class indices; label smoothing and ignore_index as in PyTorch.
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(const CrossEntropyOptions& options = {})
      : Loss("CrossEntropyLoss"), options_(options) {}
  using Loss::forward;
  Variable forward(const Variable& logits, const Tensor& target) override;
  const CrossEntropyOptions& options() const { return options_; }

 private:
  CrossEntropyOptions options_;
};

struct NLLLossOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
};

/// log_probs [N, C], target [N] i64.
class NLLLoss : public Loss {
 public:
  explicit NLLLoss(const NLLLossOptions& options = {}) : Loss("NLLLoss"), options_(options) {}
  using Loss::forward;
  Variable forward(const Variable& log_probs, const Tensor& target) override;

 private:
  NLLLossOptions options_;
};

/// Mean (or sum, or none) of squared differences; target has input's shape.
class MSELoss : public Loss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean) : Loss("MSELoss"), reduction_(reduction) {}
  using Loss::forward;
  Variable forward(const Variable& input, const Tensor& target) override;
  /// A target that is itself differentiable.
  Variable forward(const Variable& input, const Variable& target);

 private:
  Reduction reduction_;
};

}  // namespace lockstep::nn
