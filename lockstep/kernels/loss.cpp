#include "lockstep/kernels/loss.h"

#include <cmath>

#include "lockstep/kernels/cuda/loss.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/cpu/vector_math.h"

namespace lockstep::kernels {

namespace {
bool fast(DType t) { return backendFor(t) == Backend::onednn && t == DType::f32; }

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

// sum_j exp(row[j] - mx), row[j] <= mx.
LOCKSTEP_VECTOR_CLONES float sumExp(const float* __restrict row, int64_t n, float mx) {
  float se = 0;
#pragma omp simd reduction(+ : se)
  for (int64_t j = 0; j < n; ++j) se += expNonPositive(row[j] - mx);
  return se;
}

// out[j] = (exp(row[j] - lse) - off) * s: one row of softmax - smoothed target, times the loss grad.
LOCKSTEP_VECTOR_CLONES void softmaxMinus(const float* __restrict row, int64_t n, float lse, float off,
                                         float s, float* __restrict out) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) out[j] = (expNonPositive(row[j] - lse) - off) * s;
}

// Row i's logsumexp and loss in two passes over the row, threaded over rows. Nothing of size
// [N, C] is allocated: the backward recomputes softmax from the logits and this logsumexp.
std::pair<Tensor, Tensor> crossEntropyFast(const Tensor& logits0, const Tensor& target0,
                                           const CrossEntropyParams& p) {
  Tensor x = logits0.contiguous(), tg = target0.contiguous();
  const int64_t n = x.size(0), c = x.size(1);
  const float* px = x.data<float>();
  const int64_t* pt = tg.data<int64_t>();
  checkTargets("cross_entropy", tg, c, p.ignore_index);
  Tensor lse = Tensor::empty({n}, DType::f32);
  float* plse = lse.data<float>();
  Tensor per = Tensor::empty({n}, DType::f32);
  float* pper = per.data<float>();
  const double on = 1.0 - p.label_smoothing, off = c > 0 ? p.label_smoothing / static_cast<double>(c) : 0.0;
#pragma omp parallel for schedule(static) if (n * c > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = px + i * c;
    float mx = -INFINITY, rowsum = 0;
#pragma omp simd reduction(max : mx) reduction(+ : rowsum)
    for (int64_t j = 0; j < c; ++j) {
      mx = std::max(mx, row[j]);
      rowsum += row[j];
    }
    const float se = sumExp(row, c, mx);
    const double l = static_cast<double>(mx) + std::log(static_cast<double>(se));
    plse[i] = static_cast<float>(l);
    const int64_t k = pt[i];
    // -log p_k weighted (1 - s), plus s/C times -sum_j log p_j = C lse - sum_j x_j.
    pper[i] = k == p.ignore_index
                  ? 0.0f
                  : static_cast<float>(on * (l - row[k]) + off * (static_cast<double>(c) * l - rowsum));
  }
  if (p.reduction == LossReduction::none) return {per, lse};
  double total = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    total += pper[i];
    count += pt[i] != p.ignore_index;
  }
  const double v = p.reduction == LossReduction::sum ? total : total / static_cast<double>(count);
  return {Tensor::scalar(v, DType::f32), lse};
}

// dL/dx_ij = (exp(x_ij - lse_i) - s/C - (1 - s) [j == k]) * g_i, written straight into the gradient.
Tensor crossEntropyBackwardFast(const Tensor& gloss0, const Tensor& logits0, const Tensor& lse0,
                                const Tensor& target0, const CrossEntropyParams& p) {
  Tensor tg = target0.contiguous(), gloss = gloss0.to(DType::f32).contiguous();
  Tensor x = logits0.contiguous(), lse = lse0.contiguous();
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t* pt = tg.data<int64_t>();
  const float *px = x.data<float>(), *pl = lse.data<float>(), *pg = gloss.data<float>();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += pt[i] != p.ignore_index;
  const float base = p.reduction == LossReduction::none  ? 0.0f
                     : p.reduction == LossReduction::sum ? pg[0]
                                                         : pg[0] / static_cast<float>(count);
  const float on = static_cast<float>(1.0 - p.label_smoothing);
  const float off = c > 0 ? static_cast<float>(p.label_smoothing / static_cast<double>(c)) : 0.0f;
  Tensor gx = Tensor::empty({n, c}, DType::f32);
  float* pgx = gx.data<float>();
#pragma omp parallel for schedule(static) if (n * c > 65536)
  for (int64_t i = 0; i < n; ++i) {
    float* grow = pgx + i * c;
    const int64_t k = pt[i];
    if (k == p.ignore_index) {
      std::fill(grow, grow + c, 0.0f);
      continue;
    }
    const float s = p.reduction == LossReduction::none ? pg[i] : base;
    const float* row = px + i * c;
    const float l = pl[i];
    softmaxMinus(row, c, l, off, s, grow);
    grow[k] -= on * s;
  }
  return gx;
}
// Same-layout dense f32 operands (the usual case) run flat loops with a double accumulator.
bool mseFast(const Tensor& a, const Tensor& b) {
  return fast(a.dtype()) && a.isDense() && a.strides() == b.strides();
}

Tensor mseForwardFast(const Tensor& a, const Tensor& b, LossReduction r) {
  const float *pa = a.data<float>(), *pb = b.data<float>();
  const int64_t n = a.numel();
  if (r == LossReduction::none) {
    Tensor out = Tensor::emptyLike(a);
    float* po = out.data<float>();
    for (int64_t i = 0; i < n; ++i) po[i] = (pa[i] - pb[i]) * (pa[i] - pb[i]);
    return out;
  }
  double total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(pa[i]) - pb[i];
    total += d * d;
  }
  return Tensor::scalar(r == LossReduction::sum ? total : total / static_cast<double>(n), DType::f32);
}

Tensor mseBackwardFast(const Tensor& gloss, const Tensor& a, const Tensor& b, LossReduction r) {
  const float *pa = a.data<float>(), *pb = b.data<float>();
  const int64_t n = a.numel();
  Tensor gx = Tensor::emptyLike(a);
  float* px = gx.data<float>();
  if (r == LossReduction::none) {
    Tensor g = Tensor::emptyLike(a);
    g.copyFrom(gloss);  // the same layout as a, so index i pairs up
    const float* pg = g.data<float>();
    for (int64_t i = 0; i < n; ++i) px[i] = 2.0f * (pa[i] - pb[i]) * pg[i];
    return gx;
  }
  const double g = gloss.itemDouble();
  const float s = static_cast<float>(2.0 * (r == LossReduction::sum ? g : g / static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) px[i] = s * (pa[i] - pb[i]);
  return gx;
}
}  // namespace

std::pair<Tensor, Tensor> crossEntropyForward(const Tensor& logits, const Tensor& target,
                                              const CrossEntropyParams& p) {
  checkClassTarget("cross_entropy", logits, target);
  LOCKSTEP_ENFORCE(p.label_smoothing >= 0.0 && p.label_smoothing <= 1.0, ValueError,
                   "cross_entropy: label_smoothing must be in [0, 1], got ", p.label_smoothing);
  LOCKSTEP_ON_CUDA(logits.isCuda() ? logits : target, cuda::crossEntropyForward(logits, target, p));
  if (fast(logits.dtype())) return crossEntropyFast(logits, target, p);  // checks the targets
  checkTargets("cross_entropy", target, logits.size(1), p.ignore_index);
  return reference::crossEntropyForward(logits, target, p);
}

Tensor crossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, const CrossEntropyParams& p) {
  checkClassTarget("cross_entropy", logits, target);
  checkGloss("cross_entropy", gloss, p.reduction, {logits.size(0)});
  LOCKSTEP_ENFORCE(lse.shape() == Shape{logits.size(0)}, ValueError, "cross_entropy backward: logsumexp ",
                   lse.describe(), " does not fit logits ", logits.describe());
  LOCKSTEP_ON_CUDA(logits.isCuda() ? logits : target,
                   cuda::crossEntropyBackward(gloss, logits, lse, target, p));
  checkTargets("cross_entropy", target, logits.size(1), p.ignore_index);
  if (fast(logits.dtype()) && lse.dtype() == DType::f32) {
    return crossEntropyBackwardFast(gloss, logits, lse, target, p);
  }
  return reference::crossEntropyBackward(gloss, logits, lse, target, p);
}

Tensor nllLossForward(const Tensor& log_probs, const Tensor& target, LossReduction reduction,
                      int64_t ignore_index) {
  checkClassTarget("nll_loss", log_probs, target);
  LOCKSTEP_ON_CUDA(log_probs.isCuda() ? log_probs : target,
                   cuda::nllLossForward(log_probs, target, reduction, ignore_index));
  checkTargets("nll_loss", target, log_probs.size(1), ignore_index);
  // A gather and a sum: the reference loop is already the whole kernel.
  return reference::nllLossForward(log_probs, target, reduction, ignore_index);
}

Tensor nllLossBackward(const Tensor& gloss, const Tensor& target, int64_t num_classes,
                       LossReduction reduction, int64_t ignore_index) {
  LOCKSTEP_ENFORCE(target.dim() == 1 && target.dtype() == DType::i64, ValueError,
                   "nll_loss backward: target must be [N] i64, got ", target.describe());
  checkGloss("nll_loss", gloss, reduction, {target.size(0)});
  LOCKSTEP_ON_CUDA(gloss.isCuda() ? gloss : target,
                   cuda::nllLossBackward(gloss, target, num_classes, reduction, ignore_index));
  checkTargets("nll_loss", target, num_classes, ignore_index);
  return reference::nllLossBackward(gloss, target, num_classes, reduction, ignore_index);
}

Tensor mseLossForward(const Tensor& input, const Tensor& target, LossReduction reduction) {
  LOCKSTEP_ENFORCE(input.shape() == target.shape(), ValueError, "mse_loss: input ",
                   shapeToString(input.shape()), " and target ", shapeToString(target.shape()), " differ");
  LOCKSTEP_ENFORCE(isFloating(input.dtype()) && input.dtype() == target.dtype(), ValueError,
                   "mse_loss: input and target must share a floating dtype, got ", dtypeName(input.dtype()),
                   " and ", dtypeName(target.dtype()));
  LOCKSTEP_ON_CUDA(input.isCuda() ? input : target, cuda::mseLossForward(input, target, reduction));
  if (mseFast(input, target)) return mseForwardFast(input, target, reduction);
  return reference::mseLossForward(input, target, reduction);
}

Tensor mseLossBackward(const Tensor& gloss, const Tensor& input, const Tensor& target,
                       LossReduction reduction) {
  LOCKSTEP_ENFORCE(input.shape() == target.shape(), ValueError, "mse_loss backward: input ",
                   shapeToString(input.shape()), " and target ", shapeToString(target.shape()), " differ");
  checkGloss("mse_loss", gloss, reduction, input.shape());
  LOCKSTEP_ON_CUDA(input.isCuda() ? input : target, cuda::mseLossBackward(gloss, input, target, reduction));
  if (mseFast(input, target)) return mseBackwardFast(gloss, input, target, reduction);
  return reference::mseLossBackward(gloss, input, target, reduction);
}

}  // namespace lockstep::kernels
