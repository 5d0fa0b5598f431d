#pragma once
// Losses: cross-entropy, negative log-likelihood and mean squared error.
#include <cstdint>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
};
/// logits [N, C], target [N] of i64 class indices (a plain tensor: no gradient flows to it).
Variable crossEntropy(const Variable& logits, const Tensor& target, const CrossEntropyOptions& opts = {});
/// A language model's output layer and the cross entropy of its logits as one op: the loss of
/// crossEntropy(linear(x, weight), target, opts), without ever holding every row's logits
/// (kernels::linearCrossEntropyForward, chunk by chunk; the gradient of the logits is taken in the
/// forward and kept for the backward instead of the logits). x [N, C], weight [V, C] (no bias),
/// target [N] i64; reduction mean or sum (none: ValueError). Under autocast x and weight are lowered
/// as linear's operands are, and the loss is f32 as crossEntropy's. f16 operands take the composed
/// ops (under f16's loss scaling the fused op's unscaled f16 gradient would underflow).
Variable linearCrossEntropy(const Variable& x, const Variable& weight, const Tensor& target,
                            const CrossEntropyOptions& opts = {});
/// log_probs [N, C], target [N] i64.
Variable nllLoss(const Variable& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                 int64_t ignore_index = -100);
Variable mseLoss(const Variable& input, const Variable& target, Reduction reduction = Reduction::mean);

}  // namespace lockstep::autograd
