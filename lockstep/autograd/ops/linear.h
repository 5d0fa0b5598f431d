#pragma once
// Dense layers, activations, dropout, softmax and losses.
#include <cstdint>

#include "lockstep/autograd/variable.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::autograd {

/// y = x W^T + b; x [..., in], weight [out, in], bias [out] or undefined.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);
/// Matrix product with numpy/torch.matmul semantics for 2-d and batched (>= 3-d, broadcast batch) inputs.
Variable matmul(const Variable& a, const Variable& b);

// relu(x) is declared in ops/activation.h.
Variable leakyRelu(const Variable& x, double negative_slope = 0.01);
/// Exact (erf) GELU, as torch.nn.functional.gelu's default.
Variable gelu(const Variable& x);
Variable tanh(const Variable& x);
Variable sigmoid(const Variable& x);

/// Zeroes elements with probability p and scales the rest by 1/(1-p) when training; identity
/// otherwise. The mask comes from gen (seeded, counter-based).
Variable dropout(const Variable& x, double p, bool training, Generator& gen = defaultGenerator());

Variable softmax(const Variable& x, int64_t dim);
Variable logSoftmax(const Variable& x, int64_t dim);

enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
};
/// logits [N, C], target [N] of i64 class indices (a plain tensor: no gradient flows to it).
Variable crossEntropy(const Variable& logits, const Tensor& target, const CrossEntropyOptions& opts = {});
/// log_probs [N, C], target [N] i64.
Variable nllLoss(const Variable& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                 int64_t ignore_index = -100);
Variable mseLoss(const Variable& input, const Variable& target, Reduction reduction = Reduction::mean);

}  // namespace lockstep::autograd
