#include "lockstep/nn/loss.h"

namespace lockstep::nn {

Variable CrossEntropyLoss::forward(const Variable& logits, const Tensor& target) {
  return autograd::crossEntropy(logits, target, options_);
}

Variable NLLLoss::forward(const Variable& log_probs, const Tensor& target) {
  return autograd::nllLoss(log_probs, target, options_.reduction, options_.ignore_index);
}

Variable MSELoss::forward(const Variable& input, const Tensor& target) {
  return autograd::mseLoss(input, Variable(target), reduction_);
}

Variable MSELoss::forward(const Variable& input, const Variable& target) {
  return autograd::mseLoss(input, target, reduction_);
}

}  // namespace lockstep::nn
