#include "lockstep/kernels/loss.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/loss.h"

namespace lockstep::kernels {

namespace {
// The kernels take every dtype as it is (no f32 emulation): the reference loops compute
// low-precision losses in double and round once.
const Backends<LossKernels> kBackends{
    .cpu = &cpu::kLoss, .reference = &reference::kLoss, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kLoss)};

void checkClassTarget(const char* op, const Tensor& input, const Tensor& target) {
  LOCKSTEP_ENFORCE(input.dim() == 2 && isFloating(input.dtype()), ValueError, op,
                   ": input must be floating [N, C], got ", input.describe());
  LOCKSTEP_ENFORCE(target.dim() == 1 && target.size(0) == input.size(0), ValueError, op, ": input ",
                   shapeToString(input.shape()), " and target ", shapeToString(target.shape()),
                   " do not match (target must be [N])");
  LOCKSTEP_ENFORCE(target.dtype() == DType::i64, ValueError, op, ": target must hold i64 class indices, got ",
                   dtypeName(target.dtype()));
}

void checkGloss(const char* op, const Tensor& gloss, LossReduction r, const Shape& none_shape) {
  bool ok = r == LossReduction::none ? gloss.shape() == none_shape : gloss.numel() == 1;
  LOCKSTEP_ENFORCE(ok, ValueError, op, " backward: gradient ", shapeToString(gloss.shape()),
                   " does not fit the loss (",
                   r == LossReduction::none ? shapeToString(none_shape) : "one element", ")");
}

// Row i's target, checked against the class count (ignore_index passes through).
inline int64_t classOf(const char* op, const int64_t* t, int64_t i, int64_t c, int64_t ignore_index) {
  int64_t k = t[i];
  LOCKSTEP_ENFORCE(k == ignore_index || (k >= 0 && k < c), ValueError, op, ": target ", k, " at index ", i,
                   " is out of range for ", c, " classes");
  return k;
}

void checkTargets(const char* op, const Tensor& target, int64_t c, int64_t ignore_index) {
  Tensor t = target.contiguous();
  for (int64_t i = 0; i < t.numel(); ++i) classOf(op, t.data<int64_t>(), i, c, ignore_index);
}

// Cross entropy's f32_loss on bf16/f16 logits (see loss.h).
bool narrowF32Loss(const Tensor& logits, const CrossEntropyParams& p) {
  return p.f32_loss && isLowPrecision(logits.dtype());
}

// The classes a target may name (CrossEntropyParams::classes), checked against the columns.
int64_t targetClasses(const char* op, const Tensor& logits, const CrossEntropyParams& p) {
  const int64_t c = logits.size(1);
  LOCKSTEP_ENFORCE(p.classes >= 0 && p.classes <= c, ValueError, op, ": classes ", p.classes,
                   " must be within [0, ", c, "] (the logits' columns)");
  LOCKSTEP_ENFORCE(p.classes == 0 || p.classes == c || p.label_smoothing == 0.0, ValueError, op, ": classes ",
                   p.classes, " of ", c,
                   " columns with label smoothing (the smoothing term would sum the padding)");
  return p.classes > 0 ? p.classes : c;
}

}  // namespace

std::pair<Tensor, Tensor> crossEntropyForward(const Tensor& logits, const Tensor& target,
                                              const CrossEntropyParams& p) {
  checkClassTarget("cross_entropy", logits, target);
  LOCKSTEP_ENFORCE(p.label_smoothing >= 0.0 && p.label_smoothing <= 1.0, ValueError,
                   "cross_entropy: label_smoothing must be in [0, 1], got ", p.label_smoothing);
  const bool on_gpu = logits.isCuda() || target.isCuda();
  const int64_t classes = targetClasses("cross_entropy", logits, p);
  if (!on_gpu) checkTargets("cross_entropy", target, classes, p.ignore_index);
  // The CPU's own loops take f32 (they would compute narrow logits in f64): f32_loss casts first.
  if (narrowF32Loss(logits, p) && !on_gpu) return crossEntropyForward(logits.to(DType::f32), target, p);
  return dispatchAsIs<&LossKernels::crossEntropyForward>(kBackends, {on_gpu, logits.dtype()}, logits, target,
                                                         p);
}

namespace {
// crossEntropyBackward's checks; the classes the target may name.
int64_t checkCrossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                                  const Tensor& target, const CrossEntropyParams& p) {
  checkClassTarget("cross_entropy", logits, target);
  checkGloss("cross_entropy", gloss, p.reduction, {logits.size(0)});
  LOCKSTEP_ENFORCE(lse.shape() == Shape{logits.size(0)}, ValueError, "cross_entropy backward: logsumexp ",
                   lse.describe(), " does not fit logits ", logits.describe());
  return targetClasses("cross_entropy", logits, p);
}
}  // namespace

Tensor crossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, const CrossEntropyParams& p) {
  const int64_t classes = checkCrossEntropyBackward(gloss, logits, lse, target, p);
  const bool on_gpu = logits.isCuda() || target.isCuda();
  if (!on_gpu) checkTargets("cross_entropy", target, classes, p.ignore_index);
  if (narrowF32Loss(logits, p) && !on_gpu) {
    return crossEntropyBackward(gloss, logits.to(DType::f32), lse, target, p).to(logits.dtype());
  }
  return dispatchAsIs<&LossKernels::crossEntropyBackward>(kBackends, {on_gpu, logits.dtype()}, gloss, logits,
                                                          lse, target, p);
}

bool crossEntropyBackwardInto(Tensor& out, const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                              const Tensor& target, const CrossEntropyParams& p) {
  const LossIntoKernels* gpu = LOCKSTEP_CUDA_TABLE(cuda::kLossInto);
  if (!gpu || !logits.isCuda() || !out.isCuda() || !out.isContiguous() || out.shape() != logits.shape() ||
      out.dtype() != logits.dtype())
    return false;
  checkCrossEntropyBackward(gloss, logits, lse, target, p);
  return gpu->crossEntropyBackwardInto(out, gloss, logits, lse, target, p);
}

std::optional<std::pair<Tensor, Tensor>> crossEntropyWithGradInto(Tensor& out, const Tensor& row_grad,
                                                                  const Tensor& logits, const Tensor& target,
                                                                  const CrossEntropyParams& p) {
  const LossIntoKernels* gpu = LOCKSTEP_CUDA_TABLE(cuda::kLossInto);
  if (!gpu || !logits.isCuda() || !out.isCuda() || !out.isContiguous() || out.shape() != logits.shape() ||
      out.dtype() != logits.dtype() || p.reduction != LossReduction::none)
    return std::nullopt;
  checkClassTarget("cross_entropy", logits, target);
  checkGloss("cross_entropy", row_grad, p.reduction, {logits.size(0)});
  LOCKSTEP_ENFORCE(p.label_smoothing >= 0.0 && p.label_smoothing <= 1.0, ValueError,
                   "cross_entropy: label_smoothing must be in [0, 1], got ", p.label_smoothing);
  targetClasses("cross_entropy", logits, p);
  return gpu->crossEntropyWithGradInto(out, row_grad, logits, target, p);
}

Tensor crossEntropyRowWeights(const Tensor& target, int64_t ignore_index, LossReduction reduction,
                              DType dtype) {
  LOCKSTEP_ENFORCE(target.dim() == 1 && target.dtype() == DType::i64, ValueError,
                   "cross_entropy row weights: target must be [N] i64, got ", target.describe());
  LOCKSTEP_ENFORCE(reduction != LossReduction::none, ValueError,
                   "cross_entropy row weights: a reduction (mean or sum) is needed, got none");
  LOCKSTEP_ENFORCE(dtype == DType::f32 || dtype == DType::f64, ValueError,
                   "cross_entropy row weights: f32 or f64, got ", dtypeName(dtype));
  return dispatchAsIs<&LossKernels::crossEntropyRowWeights>(kBackends, {target.isCuda(), dtype}, target,
                                                            ignore_index, reduction, dtype);
}

Tensor nllLossForward(const Tensor& log_probs, const Tensor& target, LossReduction reduction,
                      int64_t ignore_index) {
  checkClassTarget("nll_loss", log_probs, target);
  const bool on_gpu = log_probs.isCuda() || target.isCuda();
  if (!on_gpu) checkTargets("nll_loss", target, log_probs.size(1), ignore_index);
  return dispatchAsIs<&LossKernels::nllLossForward>(kBackends, {on_gpu, log_probs.dtype()}, log_probs, target,
                                                    reduction, ignore_index);
}

Tensor nllLossBackward(const Tensor& gloss, const Tensor& target, int64_t num_classes,
                       LossReduction reduction, int64_t ignore_index) {
  LOCKSTEP_ENFORCE(target.dim() == 1 && target.dtype() == DType::i64, ValueError,
                   "nll_loss backward: target must be [N] i64, got ", target.describe());
  checkGloss("nll_loss", gloss, reduction, {target.size(0)});
  const bool on_gpu = gloss.isCuda() || target.isCuda();
  if (!on_gpu) checkTargets("nll_loss", target, num_classes, ignore_index);
  return dispatchAsIs<&LossKernels::nllLossBackward>(kBackends, {on_gpu, gloss.dtype()}, gloss, target,
                                                     num_classes, reduction, ignore_index);
}

Tensor mseLossForward(const Tensor& input, const Tensor& target, LossReduction reduction) {
  LOCKSTEP_ENFORCE(input.shape() == target.shape(), ValueError, "mse_loss: input ",
                   shapeToString(input.shape()), " and target ", shapeToString(target.shape()), " differ");
  LOCKSTEP_ENFORCE(isFloating(input.dtype()) && input.dtype() == target.dtype(), ValueError,
                   "mse_loss: input and target must share a floating dtype, got ", dtypeName(input.dtype()),
                   " and ", dtypeName(target.dtype()));
  return dispatchAsIs<&LossKernels::mseLossForward>(
      kBackends, {input.isCuda() || target.isCuda(), input.dtype()}, input, target, reduction);
}

Tensor mseLossBackward(const Tensor& gloss, const Tensor& input, const Tensor& target,
                       LossReduction reduction) {
  LOCKSTEP_ENFORCE(input.shape() == target.shape(), ValueError, "mse_loss backward: input ",
                   shapeToString(input.shape()), " and target ", shapeToString(target.shape()), " differ");
  checkGloss("mse_loss", gloss, reduction, input.shape());
  return dispatchAsIs<&LossKernels::mseLossBackward>(
      kBackends, {input.isCuda() || target.isCuda(), input.dtype()}, gloss, input, target, reduction);
}

}  // namespace lockstep::kernels
