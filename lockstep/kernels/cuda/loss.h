#pragma once
// lockstep's CUDA losses (built with LOCKSTEP_CUDA only; kernels/loss.cpp routes GPU tensors here
// after its shape and dtype checks). Same results, dtypes and shapes as the CPU: the loss in the
// input's dtype, cross-entropy's per-row logsumexp in f32 (f64 for f64 logits), gradients in the
// input's dtype. Rows compute in f32 (f64 for f64); reductions over rows add in f64.
//
// No host synchronisation: targets are not read on the host, so a target out of range (other than
// ignore_index) cannot raise as on the CPU; its row's loss is NaN (and the reduced loss with it),
// and its gradient row NaN, which the trainer's non-finite checks see.
#include <utility>

#include "lockstep/kernels/loss.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

std::pair<Tensor, Tensor> crossEntropyForward(const Tensor& logits, const Tensor& target,
                                              const CrossEntropyParams& p);
Tensor crossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, const CrossEntropyParams& p);
/// crossEntropyBackward written into out (contiguous, the logits' shape and dtype; it may be the
/// logits themselves); false (nothing written) for any other out.
bool crossEntropyBackwardInto(Tensor& out, const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                              const Tensor& target, const CrossEntropyParams& p);
/// kernels::crossEntropyWithGradInto: crossEntropyForward of a reduction none with the gradient
/// from the rows' gradients written into out (never over the logits) in the same kernel.
std::pair<Tensor, Tensor> crossEntropyWithGradInto(Tensor& out, const Tensor& row_grad, const Tensor& logits,
                                                   const Tensor& target, const CrossEntropyParams& p);
Tensor crossEntropyRowWeights(const Tensor& target, int64_t ignore_index, LossReduction reduction,
                              DType dtype);
Tensor nllLossForward(const Tensor& log_probs, const Tensor& target, LossReduction reduction,
                      int64_t ignore_index);
Tensor nllLossBackward(const Tensor& gloss, const Tensor& target, int64_t num_classes,
                       LossReduction reduction, int64_t ignore_index);
Tensor mseLossForward(const Tensor& input, const Tensor& target, LossReduction reduction);
Tensor mseLossBackward(const Tensor& gloss, const Tensor& input, const Tensor& target,
                       LossReduction reduction);

}  // namespace lockstep::kernels::cuda
