// Plain loops in double precision: the ground truth the fast kernels are tested against.
#include "lockstep/kernels/binary.h"

#include "lockstep/kernels/tables/binary.h"

namespace lockstep::kernels::reference {

namespace {
double apply(BinaryOp op, double x, double y) {
  switch (op) {
    case BinaryOp::add:
      return x + y;
    case BinaryOp::sub:
      return x - y;
    case BinaryOp::mul:
      return x * y;
    case BinaryOp::div:
      return x / y;
  }
  return 0.0;
}
// The result in `like`'s dtype and, when `like` is dense with the same shape, its layout (the fast
// kernels keep e.g. channels_last; the reference must return the same tensor, not just values).
Tensor castLike(const Tensor& y, const Tensor& like) {
  Tensor out = like.shape() == y.shape() && like.isDense() ? Tensor::emptyLike(like)
                                                           : Tensor::empty(y.shape(), like.dtype());
  out.copyFrom(y);
  return out;
}
}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape out = checkBinary(op, a, b);
  // expand() gives stride-0 views along broadcast dims; the contiguous f64 copies make the loop flat.
  Tensor ad = a.expand(out).to(DType::f64).contiguous();
  Tensor bd = b.expand(out).to(DType::f64).contiguous();
  Tensor y = Tensor::empty(out, DType::f64);
  const double* pa = ad.data<double>();
  const double* pb = bd.data<double>();
  double* py = y.data<double>();
  for (int64_t i = 0; i < y.numel(); ++i) py[i] = apply(op, pa[i], pb[i]);
  if (b.shape() == out && !(a.shape() == out && a.isDense()) && b.isDense()) return castLike(y, b);
  return castLike(y, a);
}

Tensor binaryScalar(BinaryOp op, const Tensor& a, double s) {
  Tensor ad = a.to(DType::f64).contiguous();
  Tensor y = Tensor::empty(a.shape(), DType::f64);
  const double* pa = ad.data<double>();
  double* py = y.data<double>();
  for (int64_t i = 0; i < y.numel(); ++i) py[i] = apply(op, pa[i], s);
  return castLike(y, a);
}

Tensor binaryMixed(BinaryOp op, const Tensor& a, const Tensor& b) {
  return reference::binary(op, a.to(DType::f32), b.to(DType::f32));
}

const BinaryKernels kBinary{LOCKSTEP_BINARY_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
