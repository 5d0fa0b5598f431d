// The cpu backend's losses: cross entropy and MSE as f32 loops (see kernels/dispatch.h); other
// dtypes and layouts run the reference loops. nll_loss (a gather and a sum) has none: the
// reference loop is already the whole kernel. The entry points have checked the targets.
#include "lockstep/kernels/tables/loss.h"

#include <algorithm>
#include <cmath>

#include "lockstep/kernels/cpu/vector_math.h"

namespace lockstep::kernels::cpu {

namespace {

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
    // -log p_k weighted (1 - s), plus s/C times -sum_j log p_j = C lse - sum_j x_j, that term only
    // with smoothing (a masked, -inf, logit makes it infinite; 0 * inf would be NaN).
    const double smoothed = off > 0 ? off * (static_cast<double>(c) * l - rowsum) : 0.0;
    pper[i] = k == p.ignore_index ? 0.0f : static_cast<float>(on * (l - row[k]) + smoothed);
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
  return a.dtype() == DType::f32 && a.isDense() && a.strides() == b.strides();
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

std::pair<Tensor, Tensor> crossEntropyForward(const Tensor& logits, const Tensor& target,
                                              const CrossEntropyParams& p) {
  if (logits.dtype() != DType::f32) return reference::kLoss.crossEntropyForward(logits, target, p);
  return crossEntropyFast(logits, target, p);
}

Tensor crossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, const CrossEntropyParams& p) {
  if (logits.dtype() != DType::f32 || lse.dtype() != DType::f32) {
    return reference::kLoss.crossEntropyBackward(gloss, logits, lse, target, p);
  }
  return crossEntropyBackwardFast(gloss, logits, lse, target, p);
}

Tensor mseLossForward(const Tensor& input, const Tensor& target, LossReduction reduction) {
  if (!mseFast(input, target)) return reference::kLoss.mseLossForward(input, target, reduction);
  return mseForwardFast(input, target, reduction);
}

Tensor mseLossBackward(const Tensor& gloss, const Tensor& input, const Tensor& target,
                       LossReduction reduction) {
  if (!mseFast(input, target)) return reference::kLoss.mseLossBackward(gloss, input, target, reduction);
  return mseBackwardFast(gloss, input, target, reduction);
}

}  // namespace

const LossKernels kLoss{
    .crossEntropyForward = &crossEntropyForward,
    .crossEntropyBackward = &crossEntropyBackward,
    .mseLossForward = &mseLossForward,
    .mseLossBackward = &mseLossBackward,
};

}  // namespace lockstep::kernels::cpu
