// Plain loops in double precision: the ground truth the fast kernels are tested against.
#include "lockstep/kernels/unary.h"

#include <cmath>

#include "lockstep/kernels/tables/unary.h"

namespace lockstep::kernels::reference {

namespace {
// The result in `like`'s dtype and, when dense, its layout (as the fast kernels return it).
Tensor castLike(const Tensor& y, const Tensor& like) {
  Tensor out = like.isDense() ? Tensor::emptyLike(like) : Tensor::empty(y.shape(), like.dtype());
  out.copyFrom(y);
  return out;
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x, double p) {
  Tensor xd = x.to(DType::f64).contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  const double* px = xd.data<double>();
  double* py = y.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = px[i];
    switch (op) {
      case UnaryOp::neg:
        py[i] = -v;
        break;
      case UnaryOp::exp:
        py[i] = std::exp(v);
        break;
      case UnaryOp::log:
        py[i] = std::log(v);
        break;
      case UnaryOp::sqrt:
        py[i] = std::sqrt(v);
        break;
      case UnaryOp::pow:
        py[i] = powOfScalar(v, p);
        break;
    }
  }
  return castLike(y, x);
}

Tensor unaryBackward(UnaryOp op, const Tensor& gy, const Tensor& saved, double p) {
  Tensor g = gy.to(DType::f64).contiguous(), s = saved.to(DType::f64).contiguous();
  Tensor gx = Tensor::empty(saved.shape(), DType::f64);
  const double* pg = g.data<double>();
  const double* ps = s.data<double>();
  double* px = gx.data<double>();
  for (int64_t i = 0; i < gx.numel(); ++i) {
    switch (op) {
      case UnaryOp::neg:
        px[i] = -pg[i];
        break;
      case UnaryOp::exp:
        px[i] = pg[i] * ps[i];
        break;  // saved = y = exp(x)
      case UnaryOp::log:
        px[i] = pg[i] / ps[i];
        break;  // saved = x
      case UnaryOp::sqrt:
        px[i] = pg[i] / (2.0 * ps[i]);
        break;            // saved = y = sqrt(x)
      case UnaryOp::pow:  // torch's pow_backward: 0 for p = 0 (else 0 * inf at x = 0)
        px[i] = p == 0.0 ? 0.0 : pg[i] * (p * powOfScalar(ps[i], p - 1.0));
        break;
    }
  }
  return castLike(gx, saved);
}

const UnaryKernels kUnary{LOCKSTEP_UNARY_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
