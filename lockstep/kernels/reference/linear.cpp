// Plain loops in double precision: the ground truth the oneDNN kernels are tested against.
#include "lockstep/kernels/linear.h"

#include "lockstep/kernels/tables/linear.h"

namespace lockstep::kernels::reference {

namespace {
Tensor f64(const Tensor& t) { return t.to(DType::f64).contiguous(); }
// [..., c] as [rows, c] (a contiguous f64 copy).
Tensor rowsF64(const Tensor& t) { return f64(t).reshape({-1, t.size(t.dim() - 1)}); }
Shape withLast(Shape s, int64_t last) {
  s.back() = last;
  return s;
}
}  // namespace

Tensor linearForward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor xr = rowsF64(x), w = f64(weight);
  const int64_t m = xr.size(0), in = xr.size(1), out = w.size(0);
  Tensor y = Tensor::empty({m, out}, DType::f64);
  const double *px = xr.data<double>(), *pw = w.data<double>();
  std::vector<double> b = bias.defined() ? bias.toVector<double>() : std::vector<double>(out, 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < in; ++i) s += px[r * in + i] * pw[o * in + i];
      y.data<double>()[r * out + o] = s;
    }
  }
  return y.view(withLast(x.shape(), out)).to(x.dtype());
}

Tensor linearBackwardData(const Tensor& gy, const Tensor& weight) {
  Tensor g = rowsF64(gy), w = f64(weight);
  const int64_t m = g.size(0), out = w.size(0), in = w.size(1);
  Tensor gx = Tensor::zeros({m, in}, DType::f64);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i)
        gx.data<double>()[r * in + i] += g.data<double>()[r * out + o] * w.data<double>()[o * in + i];
    }
  }
  return gx.view(withLast(gy.shape(), in)).to(gy.dtype());
}

std::pair<Tensor, Tensor> linearBackwardWeights(const Tensor& gy, const Tensor& x, bool with_bias) {
  Tensor g = rowsF64(gy), xr = rowsF64(x);
  const int64_t m = xr.size(0), in = xr.size(1), out = g.size(1);
  Tensor gw = Tensor::zeros({out, in}, DType::f64), gb = Tensor::zeros({out}, DType::f64);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      const double go = g.data<double>()[r * out + o];
      gb.data<double>()[o] += go;
      for (int64_t i = 0; i < in; ++i) gw.data<double>()[o * in + i] += go * xr.data<double>()[r * in + i];
    }
  }
  return {gw.to(x.dtype()), with_bias ? gb.to(x.dtype()) : Tensor()};
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcastShapes(ba, bb, "matmul");
  const int64_t m = a.size(a.dim() - 2), k = a.size(a.dim() - 1), n = b.size(b.dim() - 1);
  Shape full_a = batch, full_b = batch, out_shape = batch;
  full_a.insert(full_a.end(), {m, k});
  full_b.insert(full_b.end(), {k, n});
  out_shape.insert(out_shape.end(), {m, n});
  // Materialise the broadcast so every batch has its own contiguous [m, k] and [k, n] blocks.
  Tensor ea = f64(f64(a).expand(full_a)), eb = f64(f64(b).expand(full_b));
  Tensor y = Tensor::zeros(out_shape, DType::f64);
  const int64_t nb = shapeNumel(batch);
  const double *pa = ea.data<double>(), *pb = eb.data<double>();
  double* py = y.data<double>();
  for (int64_t t = 0; t < nb; ++t) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += pa[t * m * k + i * k + p] * pb[t * k * n + p * n + j];
        py[t * m * n + i * n + j] = s;
      }
    }
  }
  return y.to(a.dtype());
}

const LinearKernels kLinear{LOCKSTEP_LINEAR_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
