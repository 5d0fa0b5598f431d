// Plain loops in double precision: the ground truth for the loss kernels. Cross-entropy is written
// the long way on purpose (log-softmax, then NLL and the smoothing term as PyTorch defines them).
#include "lockstep/kernels/loss.h"

#include <cmath>

#include "lockstep/kernels/tables/loss.h"

namespace lockstep::kernels::reference {

namespace {
Tensor f64(const Tensor& t) { return t.to(DType::f64).contiguous(); }

Tensor reduce(const Tensor& per_item, LossReduction r, double count, DType dtype) {
  if (r == LossReduction::none) return per_item.to(dtype);
  double s = 0;
  for (double v : per_item.toVector<double>()) s += v;
  return Tensor::scalar(r == LossReduction::sum ? s : s / count, dtype);
}

// The factor each row's gradient carries: g, g / count, or g[i].
double rowScale(const Tensor& g, LossReduction r, int64_t i, double count) {
  if (r == LossReduction::none) return g.data<double>()[i];
  return r == LossReduction::sum ? g.data<double>()[0] : g.data<double>()[0] / count;
}

int64_t countKept(const std::vector<int64_t>& t, int64_t ignore_index) {
  int64_t n = 0;
  for (int64_t k : t) n += k != ignore_index;
  return n;
}
}  // namespace

std::pair<Tensor, Tensor> crossEntropyForward(const Tensor& logits, const Tensor& target,
                                              const CrossEntropyParams& p) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor x = f64(logits), lse = Tensor::empty({n}, DType::f64), per = Tensor::zeros({n}, DType::f64);
  auto t = target.toVector<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x.data<double>()[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(x.data<double>()[i * c + j] - mx);
    std::vector<double> logp(c);
    lse.data<double>()[i] = mx + std::log(s);
    for (int64_t j = 0; j < c; ++j) logp[j] = x.data<double>()[i * c + j] - mx - std::log(s);
    if (t[i] == p.ignore_index) continue;
    double smooth = 0;
    for (int64_t j = 0; j < c; ++j) smooth -= logp[j];
    // The smoothing term only with smoothing (as torch): a masked (-inf) logit makes it infinite.
    per.data<double>()[i] = (1.0 - p.label_smoothing) * -logp[t[i]] +
                            (p.label_smoothing > 0 ? p.label_smoothing / c * smooth : 0.0);
  }
  double count = static_cast<double>(countKept(t, p.ignore_index));
  return {reduce(per, p.reduction, count, logits.dtype()),
          lse.to(logits.dtype() == DType::f64 ? DType::f64 : DType::f32)};
}

Tensor crossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, const CrossEntropyParams& p) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor x = f64(logits), l = f64(lse), g = f64(gloss), gx = Tensor::zeros({n, c}, DType::f64);
  auto t = target.toVector<int64_t>();
  double count = static_cast<double>(countKept(t, p.ignore_index));
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == p.ignore_index) continue;
    const double s = rowScale(g, p.reduction, i, count);
    for (int64_t j = 0; j < c; ++j) {
      double q = p.label_smoothing / c + (j == t[i] ? 1.0 - p.label_smoothing : 0.0);
      const double prob = std::exp(x.data<double>()[i * c + j] - l.data<double>()[i]);
      gx.data<double>()[i * c + j] = (prob - q) * s;
    }
  }
  return gx.to(logits.dtype());
}

Tensor crossEntropyRowWeights(const Tensor& target, int64_t ignore_index, LossReduction reduction,
                              DType dtype) {
  auto t = target.toVector<int64_t>();
  const int64_t kept = countKept(t, ignore_index);
  // A mean over no rows is NaN (0 / 0, as the loss itself): every row carries it then.
  const bool mean = reduction == LossReduction::mean;
  const double share = !mean ? 1.0 : kept > 0 ? 1.0 / static_cast<double>(kept) : std::nan("");
  Tensor w = Tensor::empty({static_cast<int64_t>(t.size())}, DType::f64);
  for (size_t i = 0; i < t.size(); ++i) w.data<double>()[i] = t[i] == ignore_index && kept > 0 ? 0.0 : share;
  return w.to(dtype);
}

Tensor nllLossForward(const Tensor& log_probs, const Tensor& target, LossReduction reduction,
                      int64_t ignore_index) {
  const int64_t n = log_probs.size(0), c = log_probs.size(1);
  Tensor lp = f64(log_probs), per = Tensor::zeros({n}, DType::f64);
  auto t = target.toVector<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] != ignore_index) per.data<double>()[i] = -lp.data<double>()[i * c + t[i]];
  }
  return reduce(per, reduction, static_cast<double>(countKept(t, ignore_index)), log_probs.dtype());
}

Tensor nllLossBackward(const Tensor& gloss, const Tensor& target, int64_t num_classes,
                       LossReduction reduction, int64_t ignore_index) {
  const int64_t n = target.size(0);
  Tensor g = f64(gloss), gx = Tensor::zeros({n, num_classes}, DType::f64);
  auto t = target.toVector<int64_t>();
  double count = static_cast<double>(countKept(t, ignore_index));
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] != ignore_index) gx.data<double>()[i * num_classes + t[i]] = -rowScale(g, reduction, i, count);
  }
  return gx.to(gloss.dtype());
}

Tensor mseLossForward(const Tensor& input, const Tensor& target, LossReduction reduction) {
  Tensor a = f64(input), b = f64(target), per = Tensor::empty(input.shape(), DType::f64);
  for (int64_t i = 0; i < a.numel(); ++i) {
    double d = a.data<double>()[i] - b.data<double>()[i];
    per.data<double>()[i] = d * d;
  }
  return reduce(per, reduction, static_cast<double>(input.numel()), input.dtype());
}

Tensor mseLossBackward(const Tensor& gloss, const Tensor& input, const Tensor& target,
                       LossReduction reduction) {
  Tensor a = f64(input), b = f64(target), g = f64(gloss), gx = Tensor::empty(input.shape(), DType::f64);
  const double count = static_cast<double>(input.numel());
  for (int64_t i = 0; i < a.numel(); ++i) {
    gx.data<double>()[i] =
        2.0 * (a.data<double>()[i] - b.data<double>()[i]) * rowScale(g, reduction, i, count);
  }
  return gx.to(input.dtype());
}

const LossKernels kLoss{LOCKSTEP_LOSS_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
