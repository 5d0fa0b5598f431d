// Plain loops in double precision: the ground truth the fast transformer kernels are tested against.
#include "lockstep/kernels/transformer.h"

#include <cmath>

#include "lockstep/kernels/tables/transformer.h"

namespace lockstep::kernels::reference {

namespace {
Tensor asF64(const Tensor& t) { return t.to(DType::f64).contiguous(); }
DType statsDType(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }
int64_t lastDim(const Tensor& x) { return x.size(x.dim() - 1); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

Tensor embeddingForward(const Tensor& weight, const Tensor& indices) {
  Tensor w = asF64(weight), ix = indices.contiguous();
  const int64_t d = w.size(1);
  Shape shape = indices.shape();
  shape.push_back(d);
  Tensor y = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < ix.numel(); ++i) {
    const int64_t row = ix.data<int64_t>()[i];
    for (int64_t c = 0; c < d; ++c) y.data<double>()[i * d + c] = w.data<double>()[row * d + c];
  }
  return y.to(weight.dtype());
}

Tensor embeddingBackward(const Tensor& gy, const Tensor& indices, int64_t num_rows, int64_t padding_idx) {
  Tensor g = asF64(gy), ix = indices.contiguous();
  const int64_t d = lastDim(gy);
  Tensor gw = Tensor::zeros({num_rows, d}, DType::f64);
  for (int64_t i = 0; i < ix.numel(); ++i) {
    const int64_t row = ix.data<int64_t>()[i];
    if (row == padding_idx) continue;
    for (int64_t c = 0; c < d; ++c) gw.data<double>()[row * d + c] += g.data<double>()[i * d + c];
  }
  return gw.to(gy.dtype());
}

// y in x's dtype whatever y_dtype says: kernels::rmsNormForward rounds it.
RmsNormOutput rmsNormForward(const Tensor& x, const Tensor& weight, double eps, DType /*y_dtype*/) {
  Tensor xd = asF64(x);
  const int64_t d = lastDim(x), rows = d == 0 ? 0 : x.numel() / d;
  Tensor w = weight.defined() ? asF64(weight) : Tensor::ones({d}, DType::f64);
  Tensor y = Tensor::empty(x.shape(), DType::f64), rstd = Tensor::empty({rows}, DType::f64);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = xd.data<double>() + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += row[i] * row[i];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    rstd.data<double>()[r] = s;
    for (int64_t i = 0; i < d; ++i) y.data<double>()[r * d + i] = row[i] * s * w.data<double>()[i];
  }
  return {y.to(x.dtype()), rstd.to(statsDType(x.dtype()))};
}

RmsNormGrads rmsNormBackward(const Tensor& gy, const Tensor& x, const Tensor& rstd, const Tensor& weight) {
  Tensor xd = asF64(x), g = asF64(gy), rs = asF64(rstd);
  const int64_t d = lastDim(x), rows = d == 0 ? 0 : x.numel() / d;
  Tensor w = weight.defined() ? asF64(weight) : Tensor::ones({d}, DType::f64);
  Tensor gx = Tensor::empty(x.shape(), DType::f64), gw = Tensor::zeros({d}, DType::f64);
  const double *px = xd.data<double>(), *pg = g.data<double>(), *pw = w.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const double s = rs.data<double>()[r];
    // y_i = x_i s w_i with s = (mean(x^2) + eps)^(-1/2), ds/dx_k = -s^3 x_k / d.
    double dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += pg[r * d + i] * pw[i] * px[r * d + i];
    for (int64_t k = 0; k < d; ++k) {
      gx.data<double>()[r * d + k] =
          s * pg[r * d + k] * pw[k] - dot * s * s * s * px[r * d + k] / static_cast<double>(d);
      gw.data<double>()[k] += pg[r * d + k] * px[r * d + k] * s;
    }
  }
  RmsNormGrads out{gx.to(x.dtype()), Tensor()};
  if (weight.defined()) out.gweight = gw.to(weight.dtype());
  return out;
}

Tensor swigluForward(const Tensor& gate, const Tensor& up) {
  Tensor g = asF64(gate), u = asF64(up), y = Tensor::empty(gate.shape(), DType::f64);
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double a = g.data<double>()[i];
    y.data<double>()[i] = a * sigmoid(a) * u.data<double>()[i];
  }
  return y.to(gate.dtype());
}

std::pair<Tensor, Tensor> swigluBackward(const Tensor& gy, const Tensor& gate, const Tensor& up) {
  Tensor g = asF64(gy), a = asF64(gate), u = asF64(up);
  Tensor ga = Tensor::empty(gate.shape(), DType::f64), gu = Tensor::empty(gate.shape(), DType::f64);
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<double>()[i], s = sigmoid(x);
    // d silu(x) / dx = s + x s (1 - s).
    ga.data<double>()[i] = g.data<double>()[i] * u.data<double>()[i] * (s + x * s * (1.0 - s));
    gu.data<double>()[i] = g.data<double>()[i] * x * s;
  }
  return {ga.to(gate.dtype()), gu.to(gate.dtype())};
}

namespace {
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, double sign) {
  Tensor xd = asF64(x), c = asF64(cos), s = asF64(sin);
  const int64_t t = x.size(x.dim() - 2), d = lastDim(x), h = d / 2;
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  for (int64_t r = 0; r < (d == 0 ? 0 : x.numel() / d); ++r) {
    const int64_t pos = r % t;
    for (int64_t i = 0; i < h; ++i) {
      const double x1 = xd.data<double>()[r * d + i], x2 = xd.data<double>()[r * d + h + i];
      const double cv = c.data<double>()[pos * h + i], sv = sign * s.data<double>()[pos * h + i];
      y.data<double>()[r * d + i] = x1 * cv - x2 * sv;
      y.data<double>()[r * d + h + i] = x2 * cv + x1 * sv;
    }
  }
  return y.to(x.dtype());
}
}  // namespace

Tensor rotaryForward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  return rotate(x, cos, sin, 1.0);
}
Tensor rotaryBackward(const Tensor& gy, const Tensor& cos, const Tensor& sin) {
  return rotate(gy, cos, sin, -1.0);
}

const TransformerKernels kTransformer{LOCKSTEP_TRANSFORMER_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
