#pragma once
// Losses. Cross-entropy is one fused kernel (log-softmax + NLL + label smoothing in one pass over
// each row) with a single backward, (softmax - smoothed one-hot) * g / count, recomputed from the
// logits and the saved per-row logsumexp: no chain of primitives, and no [N, C] temporary.
// None of these have oneDNN primitives: f32 runs tight loops in loss.cpp, f64 the reference loops
// (nll_loss, a gather, runs the reference loop for every dtype).
#include <cstdint>
#include <utility>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

enum class LossReduction { none, mean, sum };

struct CrossEntropyParams {
  LossReduction reduction = LossReduction::mean;
  /// PyTorch's definition: the target distribution is (1 - s) one_hot + s / C.
  double label_smoothing = 0.0;
  /// Rows whose target is this contribute nothing, and are left out of the mean's count.
  int64_t ignore_index = -100;
  /// For bf16/f16 logits (autocast's f32 policy for losses): the loss comes back f32, exactly as
  /// if the logits had been cast to f32 first, and the gradient is rounded once to the logits'
  /// dtype, as that cast's backward would. A GPU reads the narrow logits as they are (its kernels
  /// compute in f32 anyway), so no [N, C] f32 copy is made or kept for the backward, and none of
  /// the gradient is cast back: a GPT-2 head's logits are 823M values at batch 16 x 1024. No
  /// effect on f32 or f64 logits.
  bool f32_loss = false;
};

/// logits [N, C] floating, target [N] i64. Returns {loss, lse}: loss is 0-d (mean, sum) or [N]
/// (none); lse [N] is each row's logsumexp (f32, f64 for f64 logits). With the logits it is all
/// the backward needs, so no [N, C] softmax is kept between forward and backward (a 50257-word
/// vocabulary makes that copy as large as the logits).
std::pair<Tensor, Tensor> crossEntropyForward(const Tensor& logits, const Tensor& target,
                                              const CrossEntropyParams& p);
/// dL/dlogits from dL/dloss (0-d, or [N] for none): softmax - smoothed target, written directly.
Tensor crossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, const CrossEntropyParams& p);

/// -log_probs[i, target[i]], reduced; log_probs [N, C], target [N] i64.
Tensor nllLossForward(const Tensor& log_probs, const Tensor& target, LossReduction reduction,
                      int64_t ignore_index);
/// dL/dlog_probs (shape [N, C], dtype of gloss).
Tensor nllLossBackward(const Tensor& gloss, const Tensor& target, int64_t num_classes,
                       LossReduction reduction, int64_t ignore_index);

/// (input - target)^2, reduced; same shapes.
Tensor mseLossForward(const Tensor& input, const Tensor& target, LossReduction reduction);
/// dL/dinput; dL/dtarget is its negation.
Tensor mseLossBackward(const Tensor& gloss, const Tensor& input, const Tensor& target,
                       LossReduction reduction);

}  // namespace lockstep::kernels
