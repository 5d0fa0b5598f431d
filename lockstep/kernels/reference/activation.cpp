// Plain loops: the ground truth the fast kernels are tested against. Clarity over speed.
#include "lockstep/kernels/activation.h"

namespace lockstep::kernels::reference {

namespace {
template <typename Fn>
Tensor mapF64(const Tensor& x, Fn&& fn) {
  Tensor xd = x.to(DType::f64).contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  const double* px = xd.data<double>();
  double* py = y.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) py[i] = fn(px[i]);
  return y.to(x.dtype());
}
}  // namespace

Tensor reluForward(const Tensor& x) {
  return mapF64(x, [](double v) { return v > 0 ? v : 0.0; });
}

Tensor reluBackward(const Tensor& gy, const Tensor& y) {
  Tensor g = gy.to(DType::f64).contiguous(), yd = y.to(DType::f64).contiguous();
  Tensor gx = Tensor::empty(y.shape(), DType::f64);
  for (int64_t i = 0; i < y.numel(); ++i) gx.data<double>()[i] = yd.data<double>()[i] > 0 ? g.data<double>()[i] : 0.0;
  return gx.to(y.dtype());
}

}  // namespace lockstep::kernels::reference
