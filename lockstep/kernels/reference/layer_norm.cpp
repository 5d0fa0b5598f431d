// Plain loops in double precision: the ground truth the fast kernels are tested against.
#include "lockstep/kernels/layer_norm.h"

#include <cmath>

#include "lockstep/kernels/tables/layer_norm.h"

namespace lockstep::kernels::reference {

namespace {
DType statsDType(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }
Tensor asF64(const Tensor& t) { return t.to(DType::f64).contiguous(); }
}  // namespace

// y in x's dtype whatever y_dtype says: kernels::layerNormForward rounds it.
LayerNormOutput layerNormForward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps, DType /*y_dtype*/) {
  const int64_t n = checkLayerNorm(x, normalized_shape, weight, bias);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor xd = asF64(x);
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  Tensor mean = Tensor::empty({rows}, DType::f64), var = Tensor::empty({rows}, DType::f64);
  Tensor w = weight.defined() ? asF64(weight) : Tensor::ones({n}, DType::f64);
  Tensor b = bias.defined() ? asF64(bias) : Tensor::zeros({n}, DType::f64);
  const double *px = xd.data<double>(), *pw = w.data<double>(), *pb = b.data<double>();
  double* py = y.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = px + r * n;
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += row[i];
    m /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) v += (row[i] - m) * (row[i] - m);
    v /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(v + eps);
    for (int64_t i = 0; i < n; ++i) py[r * n + i] = (row[i] - m) * rstd * pw[i] + pb[i];
    mean.data<double>()[r] = m;
    var.data<double>()[r] = v;
  }
  DType st = statsDType(x.dtype());
  return {y.to(x.dtype()), mean.to(st), var.to(st)};
}

LayerNormGrads layerNormBackward(const Tensor& gy, const Tensor& x, const Tensor& mean,
                                 const Tensor& variance, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps) {
  const int64_t n = checkLayerNorm(x, normalized_shape, weight, bias);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor xd = asF64(x), gd = asF64(gy), md = asF64(mean), vd = asF64(variance);
  Tensor w = weight.defined() ? asF64(weight) : Tensor::ones({n}, DType::f64);
  Tensor gx = Tensor::empty(x.shape(), DType::f64);
  Tensor gw = Tensor::zeros(normalized_shape, DType::f64), gb = Tensor::zeros(normalized_shape, DType::f64);
  const double *px = xd.data<double>(), *pg = gd.data<double>(), *pw = w.data<double>();
  double *pgx = gx.data<double>(), *pgw = gw.data<double>(), *pgb = gb.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const double m = md.data<double>()[r];
    const double rstd = 1.0 / std::sqrt(vd.data<double>()[r] + eps);
    // With xhat = (x - m) * rstd and g = dy * w:  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    double mean_g = 0, mean_gx = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xhat = (px[r * n + i] - m) * rstd;
      const double g = pg[r * n + i] * pw[i];
      mean_g += g;
      mean_gx += g * xhat;
      pgw[i] += pg[r * n + i] * xhat;
      pgb[i] += pg[r * n + i];
    }
    mean_g /= static_cast<double>(n);
    mean_gx /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) {
      const double xhat = (px[r * n + i] - m) * rstd;
      pgx[r * n + i] = rstd * (pg[r * n + i] * pw[i] - mean_g - xhat * mean_gx);
    }
  }
  LayerNormGrads out;
  out.gx = gx.to(x.dtype());
  if (weight.defined()) out.gweight = gw.to(weight.dtype());
  if (bias.defined()) out.gbias = gb.to(bias.dtype());
  return out;
}

const LayerNormKernels kLayerNorm{LOCKSTEP_LAYER_NORM_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
