// Plain loops in double precision: the ground truth for the CPU batch normalisations. A residual and
// a relu are the reference's own add and relu after it, the ops the fused kernels stand for.
#include "lockstep/kernels/batch_norm.h"

#include <cmath>

#include "lockstep/kernels/layout.h"
#include "lockstep/kernels/tables/batch_norm.h"

namespace lockstep::kernels::reference {

namespace {
std::vector<double> orFill(const Tensor& t, int64_t n, double value) {
  return t.defined() ? t.toVector<double>() : std::vector<double>(static_cast<size_t>(n), value);
}

// Calls fn(c, i) for every element index i (row-major [N, C, H, W]) of channel c.
template <typename Fn>
void forEachElement(const Shape& s, Fn&& fn) {
  const int64_t plane = s[2] * s[3];
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t k = 0; k < plane; ++k) fn(c, (n * s[1] + c) * plane + k);
}
BatchNormResult normalise(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var, const BatchNormParams& p) {
  const Shape& s = x.shape();
  const int64_t C = s[1];
  const double count = double(s[0] * s[2] * s[3]);
  auto xv = x.toVector<double>();
  std::vector<double> mean(C, 0.0), var(C, 0.0);
  if (p.training) {
    forEachElement(s, [&](int64_t c, int64_t i) { mean[c] += xv[i] / count; });
    forEachElement(s, [&](int64_t c, int64_t i) { var[c] += (xv[i] - mean[c]) * (xv[i] - mean[c]) / count; });
  } else {
    mean = running_mean.toVector<double>();
    var = running_var.toVector<double>();
  }
  auto w = orFill(weight, C, 1.0), b = orFill(bias, C, 0.0);
  std::vector<double> y(xv.size());
  forEachElement(
      s, [&](int64_t c, int64_t i) { y[i] = (xv[i] - mean[c]) / std::sqrt(var[c] + p.eps) * w[c] + b[c]; });
  return {inFormat(Tensor::fromVector<double>(y, s).to(x.dtype()), formatOf(x)),
          Tensor::fromVector<double>(mean, {C}), Tensor::fromVector<double>(var, {C})};
}

BatchNormGrads normaliseBackward(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias,
                                 const Tensor& mean_t, const Tensor& var_t, const BatchNormParams& p) {
  const Shape& s = x.shape();
  const int64_t C = s[1];
  const double count = double(s[0] * s[2] * s[3]);
  auto xv = x.toVector<double>(), g = gy.toVector<double>();
  auto mean = mean_t.toVector<double>(), var = var_t.toVector<double>(), w = orFill(weight, C, 1.0);
  std::vector<double> invstd(C), gw(C, 0.0), gb(C, 0.0), gx(xv.size());
  for (int64_t c = 0; c < C; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + p.eps);
  forEachElement(s, [&](int64_t c, int64_t i) {
    gb[c] += g[i];
    gw[c] += g[i] * (xv[i] - mean[c]) * invstd[c];
  });
  forEachElement(s, [&](int64_t c, int64_t i) {
    if (p.training) {
      // The batch statistics depend on x too: d/dx of (x - mean(x)) / std(x).
      const double xhat = (xv[i] - mean[c]) * invstd[c];
      gx[i] = w[c] * invstd[c] * (g[i] - gb[c] / count - xhat * gw[c] / count);
    } else {
      gx[i] = g[i] * w[c] * invstd[c];
    }
  });
  BatchNormGrads out;
  out.x = inFormat(Tensor::fromVector<double>(gx, s).to(x.dtype()), formatOf(x));
  if (weight.defined()) out.weight = Tensor::fromVector<double>(gw, {C}).to(weight.dtype());
  if (with_bias) out.bias = Tensor::fromVector<double>(gb, {C}).to(x.dtype());
  return out;
}

}  // namespace

const BatchNormKernels kBatchNorm =
    ComposedBatchNorm<&normalise, &normaliseBackward, kBinary, kActivation>::table();

}  // namespace lockstep::kernels::reference
