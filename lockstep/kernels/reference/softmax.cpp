// Plain loops in double precision: the ground truth for the oneDNN softmax kernels.
#include "lockstep/kernels/softmax.h"

#include <cmath>

#include "lockstep/kernels/tables/softmax.h"

namespace lockstep::kernels::reference {

namespace {
// x viewed as [outer, n, inner] with `dim` in the middle (contiguous f64 copies).
struct Split {
  int64_t outer = 1, n = 1, inner = 1;
  Split(const Shape& s, int64_t dim0) {
    const int64_t dim = normalizeDim(dim0, static_cast<int64_t>(s.size()));
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
      if (d < dim) outer *= s[d];
      if (d == dim) n = s[d];
      if (d > dim) inner *= s[d];
    }
  }
  int64_t at(int64_t o, int64_t j, int64_t i) const { return (o * n + j) * inner + i; }
};

Tensor f64(const Tensor& t) { return t.to(DType::f64).contiguous(); }

// Results take the operand's dtype and dense layout (e.g. channels_last), as the oneDNN kernels do.
Tensor inLayoutOf(const Tensor& result, const Tensor& like) {
  Tensor out = Tensor::emptyLike(like);
  out.copyFrom(result);
  return out;
}

Tensor forward(const Tensor& x, int64_t dim, bool log) {
  Split sp(x.shape(), dim);
  Tensor xd = f64(x), y = Tensor::empty(x.shape(), DType::f64);
  const double* px = xd.data<double>();
  double* py = y.data<double>();
  for (int64_t o = 0; o < sp.outer; ++o) {
    for (int64_t i = 0; i < sp.inner; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < sp.n; ++j) mx = std::max(mx, px[sp.at(o, j, i)]);
      double sum = 0;
      for (int64_t j = 0; j < sp.n; ++j) sum += std::exp(px[sp.at(o, j, i)] - mx);
      for (int64_t j = 0; j < sp.n; ++j) {
        double z = px[sp.at(o, j, i)] - mx;
        py[sp.at(o, j, i)] = log ? z - std::log(sum) : std::exp(z) / sum;
      }
    }
  }
  return inLayoutOf(y, x);
}

Tensor backward(const Tensor& gy, const Tensor& y, int64_t dim, bool log) {
  Split sp(y.shape(), dim);
  Tensor g = f64(gy), yd = f64(y), gx = Tensor::empty(y.shape(), DType::f64);
  const double *pg = g.data<double>(), *py = yd.data<double>();
  double* px = gx.data<double>();
  for (int64_t o = 0; o < sp.outer; ++o) {
    for (int64_t i = 0; i < sp.inner; ++i) {
      double s = 0;
      for (int64_t j = 0; j < sp.n; ++j)
        s += log ? pg[sp.at(o, j, i)] : pg[sp.at(o, j, i)] * py[sp.at(o, j, i)];
      for (int64_t j = 0; j < sp.n; ++j) {
        int64_t k = sp.at(o, j, i);
        px[k] = log ? pg[k] - std::exp(py[k]) * s : py[k] * (pg[k] - s);
      }
    }
  }
  return inLayoutOf(gx, y);
}
}  // namespace

Tensor softmaxForward(const Tensor& x, int64_t dim) { return forward(x, dim, false); }
Tensor softmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) { return backward(gy, y, dim, false); }
Tensor logSoftmaxForward(const Tensor& x, int64_t dim) { return forward(x, dim, true); }
Tensor logSoftmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  return backward(gy, y, dim, true);
}

const SoftmaxKernels kSoftmax{LOCKSTEP_SOFTMAX_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
