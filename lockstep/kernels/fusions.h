#pragma once
// lockstep's fused compositions, each on by default, each with the composed ops it replaces kept as
// its fallback (the same math; where the fusion rounds once, the composed ops may round twice).
// LOCKSTEP_DISABLE_FUSIONS=name,name turns named ones off for a process: to time what each is worth
// (bench/gpu_lm.bench.sh's rows with each off), or to step around one that misbehaves on a GPU, a
// driver or a library version it was not run on, as torch.backends' switches do for PyTorch's
// backends. An unknown name is a ValueError listing the known ones. The other switches of this kind
// keep their own variables: LOCKSTEP_FUSED_LM_LOSS (train/train_data.h), LOCKSTEP_GELU_BACKWARD
// (kernels/linear.h), LOCKSTEP_GPU_ATTENTION (kernels/attention.h).
#include <string_view>

namespace lockstep::kernels {

enum class Fusion {
  /// autograd::packedQkvAttention reads q, k and v from the fused projection in place and writes
  /// their gradients into its gradient; off: split, head views, scaledDotProductAttention, merge.
  packed_qkv_attention,
  /// autograd::linearResidual and geluMlp with a residual add it in the projection's GEMM (on a GPU,
  /// cuBLASLt's C matrix); off: the projection, then add.
  residual_epilogue,
  /// kernels::linearCrossEntropyForward takes each chunk's loss and logit gradient in one pass over
  /// its logits (on a GPU, kernels::crossEntropyWithGradInto); off: the forward, then the backward.
  loss_with_grad,
};

/// The name LOCKSTEP_DISABLE_FUSIONS uses.
std::string_view fusionName(Fusion f);
/// Whether f runs: LOCKSTEP_DISABLE_FUSIONS, read once per process (ValueError when it names an
/// unknown fusion), unless setFusionEnabled said otherwise. Thread-safe.
bool fusionEnabled(Fusion f);
/// Reads LOCKSTEP_DISABLE_FUSIONS now (ValueError naming an unknown fusion) rather than at the first
/// fusion a model reaches, which a model without one never does: `lockstep train` calls it before
/// anything starts.
void checkFusionsVariable();
/// Overrides the variable for f, for the whole process (tests).
void setFusionEnabled(Fusion f, bool enabled);

}  // namespace lockstep::kernels
