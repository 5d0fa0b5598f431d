// neg, exp, log, sqrt, pow and their backward on a GPU (see elementwise.h).
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/elementwise.h"

namespace lockstep::kernels::cuda {

namespace {

// torch's pow with a scalar exponent, as kernels::powOfScalar (kernels/unary.h): the exponents it
// computes by multiplication, square roots or reciprocals, pow for the others (pow(-inf, 0.5) is
// NaN there, +inf in powf).
template <typename C>
__device__ C powOf(C x, C p) {
  if (p == C(2)) return x * x;
  if (p == C(3)) return x * x * x;
  if (p == C(0.5)) return dSqrt(x);
  if (p == C(-0.5)) return C(1) / dSqrt(x);
  if (p == C(-1)) return C(1) / x;
  if (p == C(-2)) return C(1) / (x * x);
  return dPow(x, p);
}

template <typename C>
struct UnaryFn {
  UnaryOp op;
  C p;
  __device__ C operator()(C v) const {
    switch (op) {
      case UnaryOp::neg:
        return -v;
      case UnaryOp::exp:
        return dExp(v);
      case UnaryOp::log:
        return dLog(v);
      case UnaryOp::sqrt:
        return dSqrt(v);
      case UnaryOp::pow:
        return powOf(v, p);
    }
    return v;
  }
};

// dL/dx from g = dL/dy and s, the saved y (exp, sqrt) or x (neg, log, pow).
template <typename C>
struct UnaryBackwardFn {
  UnaryOp op;
  C p;
  __device__ C operator()(C g, C s) const {
    switch (op) {
      case UnaryOp::neg:
        return -g;
      case UnaryOp::exp:
        return g * s;
      case UnaryOp::log:
        return g / s;
      case UnaryOp::sqrt:
        return g / (C(2) * s);
      case UnaryOp::pow:  // torch's pow_backward: 0 for p = 0 (not 0 * inf at x = 0)
        return p == C(0) ? C(0) : g * (p * powOf(s, p - C(1)));
    }
    return g;
  }
};

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x, double p) {
  Tensor y = Tensor::emptyLike(x);
  visitFloating(unaryOpName(op), x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    launchMap<T, 1>(y, {x}, UnaryFn<C>{op, static_cast<C>(p)});
  });
  return y;
}

Tensor unaryBackward(UnaryOp op, const Tensor& gy, const Tensor& saved, double p) {
  checkSameDevice(unaryOpName(op), gy, saved);
  Tensor gx = Tensor::emptyLike(saved);
  const Tensor g = gy.dtype() == saved.dtype() ? gy : gy.to(saved.dtype());
  visitFloating(unaryOpName(op), saved.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    launchMap<T, 2>(gx, {g, saved}, UnaryBackwardFn<C>{op, static_cast<C>(p)});
  });
  return gx;
}

}  // namespace lockstep::kernels::cuda
