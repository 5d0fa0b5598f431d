#pragma once
// Losses. Cross-entropy is one fused kernel (log-softmax + NLL + label smoothing in one pass over
// each row) with a single backward, (softmax - smoothed one-hot) * g / count, recomputed from the
// logits and the saved per-row logsumexp: no chain of primitives, and no [N, C] temporary.
// None of these have oneDNN primitives: f32 runs tight loops in loss.cpp, f64 the reference loops
// (nll_loss, a gather, runs the reference loop for every dtype).
#include <cstdint>
#include <optional>
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
  /// The classes a target may name when the logits have more columns (0: every column): a row
  /// padded beyond its vocabulary with -inf logits (linearCrossEntropy's padded GEMMs) takes a
  /// target in the padding as out of range, as the unpadded row would (NaN on a GPU, a ValueError
  /// on the host). Within [1, columns]; fewer than the columns only without label smoothing.
  int64_t classes = 0;
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
/// crossEntropyBackward's gradient written into out (contiguous, the logits' shape, dtype and
/// device; it may be the logits themselves) where the backend writes in place (a GPU): true. False,
/// having written nothing, elsewhere (the caller copies the returned gradient).
bool crossEntropyBackwardInto(Tensor& out, const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                              const Tensor& target, const CrossEntropyParams& p);

/// crossEntropyForward with reduction none and, in the same pass over the logits, the gradient
/// crossEntropyBackwardInto writes for the rows' gradients row_grad ([N]) into out (contiguous, the
/// logits' shape, dtype and device; not overlapping the logits), where the backend can (a GPU: one
/// kernel reads each row for its loss and again for its gradient): {loss, lse} as
/// crossEntropyForward's. Nothing, having written nothing,
/// elsewhere (the caller runs forward, then backward).
std::optional<std::pair<Tensor, Tensor>> crossEntropyWithGradInto(Tensor& out, const Tensor& row_grad,
                                                                  const Tensor& logits, const Tensor& target,
                                                                  const CrossEntropyParams& p);

/// Each row's share of a reduced loss: [N] in dtype, 0 where target[i] is ignore_index, else 1
/// (sum) or 1 / the rows kept (mean). reduction none: ValueError. Computed where target lives (a
/// GPU's count stays on the device).
Tensor crossEntropyRowWeights(const Tensor& target, int64_t ignore_index, LossReduction reduction,
                              DType dtype);

/// A language model's output layer and its cross entropy as one op, chunk by chunk over the rows
/// (Liger's fused linear cross entropy): the loss of the logits x W^T against target, and (with_grad)
/// the logits' gradient for a loss gradient of 1, without ever holding every row's logits. The
/// logits of a chunk of rows exist while that chunk's loss and gradient are taken; what the backward
/// keeps is that gradient ([N, V] in x's dtype, where the composed ops keep the logits and then
/// make their gradient beside them).
///
/// x [N, C] and weight [V, C] of one floating dtype, target [N] i64; p.reduction mean or sum (none:
/// ValueError); label smoothing and ignore_index as crossEntropyForward; p.f32_loss as there. The
/// loss is what crossEntropyForward(linearForward(x, weight), target, p) gives, its rows summed in
/// another order.
///
/// On a GPU, a vocabulary that leaves a row of logits off a 16-byte boundary (GPT-2's 50,257) is
/// padded to one (50,264 in bf16) without smoothing: zero weight rows whose logits the GEMM's bias
/// epilogue sets to -inf, so they add nothing to a row's softmax and get a zero gradient, and every
/// GEMM of the head takes cuBLASLt's fast kernels with no staging copies (see kernels/cuda/blas.cpp).
struct LinearCrossEntropy {
  /// 0-d: the loss.
  Tensor loss;
  /// with_grad: dL/dlogits for dL/dloss = 1, [N, Vp] with Vp >= V the padded vocabulary (columns
  /// past V zero); and the weight the forward multiplied, [Vp, C] (rows past V zero).
  Tensor grad_logits, weight;
};
LinearCrossEntropy linearCrossEntropyForward(const Tensor& x, const Tensor& weight, const Tensor& target,
                                             const CrossEntropyParams& p, bool with_grad);
/// {dL/dx [N, C], dL/dW [V, C]} from gloss (0-d) and the forward's result (x the forward's x; V =
/// the forward weight's rows). A gradient is computed only when asked for (undefined otherwise).
std::pair<Tensor, Tensor> linearCrossEntropyBackward(const Tensor& gloss, const LinearCrossEntropy& forward,
                                                     const Tensor& x, int64_t vocab, bool need_x,
                                                     bool need_weight);

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
