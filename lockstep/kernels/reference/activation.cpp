// Plain loops: the ground truth the fast kernels are tested against. Clarity over speed.
#include "lockstep/kernels/activation.h"

#include <cmath>

#include "lockstep/kernels/tables/activation.h"

namespace lockstep::kernels::reference {

namespace {
// Results take the operand's dtype and dense layout (e.g. channels_last), as the oneDNN kernels do.
Tensor inLayoutOf(const Tensor& result, const Tensor& like) {
  Tensor out = Tensor::emptyLike(like);
  out.copyFrom(result);
  return out;
}

template <typename Fn>
Tensor mapF64(const Tensor& x, Fn&& fn) {
  Tensor xd = x.to(DType::f64).contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  const double* px = xd.data<double>();
  double* py = y.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) py[i] = fn(px[i]);
  return inLayoutOf(y, x);
}

// dL/dx = gy * fn(saved), element by element.
template <typename Fn>
Tensor backwardF64(const Tensor& gy, const Tensor& saved, Fn&& dydx) {
  Tensor g = gy.to(DType::f64).contiguous(), s = saved.to(DType::f64).contiguous();
  Tensor gx = Tensor::empty(saved.shape(), DType::f64);
  for (int64_t i = 0; i < saved.numel(); ++i) {
    gx.data<double>()[i] = g.data<double>()[i] * dydx(s.data<double>()[i]);
  }
  return inLayoutOf(gx, saved);
}

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
}  // namespace

Tensor reluForward(const Tensor& x) {
  return mapF64(x, [](double v) { return v < 0 ? 0.0 : v; });  // NaN and -0.0 pass, as torch.relu
}
Tensor reluBackward(const Tensor& gy, const Tensor& y) {
  return backwardF64(gy, y, [](double v) { return v <= 0 ? 0.0 : 1.0; });  // a NaN output passes gy
}

Tensor leakyReluForward(const Tensor& x, double slope) {
  return mapF64(x, [&](double v) { return v > 0 ? v : slope * v; });
}
Tensor leakyReluBackward(const Tensor& gy, const Tensor& x, double slope) {
  return backwardF64(gy, x, [&](double v) { return v > 0 ? 1.0 : slope; });
}

Tensor geluForward(const Tensor& x) {
  return mapF64(x, [](double v) { return 0.5 * v * (1.0 + std::erf(v * kInvSqrt2)); });
}
Tensor geluBackward(const Tensor& gy, const Tensor& x) {
  return backwardF64(gy, x, [](double v) {
    return 0.5 * (1.0 + std::erf(v * kInvSqrt2)) + v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
  });
}

// 0.5 x (1 + tanh(u)), u = c (x + a x^3): d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) c (1 + 3 a x^2).
constexpr double kGeluC = 0.79788456080286535588, kGeluA = 0.044715;
Tensor geluTanhForward(const Tensor& x) {
  return mapF64(x, [](double v) { return 0.5 * v * (1.0 + std::tanh(kGeluC * (v + kGeluA * v * v * v))); });
}
Tensor geluTanhBackward(const Tensor& gy, const Tensor& x) {
  return backwardF64(gy, x, [](double v) {
    const double t = std::tanh(kGeluC * (v + kGeluA * v * v * v));
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluA * v * v);
  });
}

Tensor siluForward(const Tensor& x) {
  return mapF64(x, [](double v) { return v / (1.0 + std::exp(-v)); });
}
Tensor siluBackward(const Tensor& gy, const Tensor& x) {
  return backwardF64(gy, x, [](double v) {
    const double s = 1.0 / (1.0 + std::exp(-v));
    return s + v * s * (1.0 - s);
  });
}

Tensor tanhForward(const Tensor& x) {
  return mapF64(x, [](double v) { return std::tanh(v); });
}
Tensor tanhBackward(const Tensor& gy, const Tensor& y) {
  return backwardF64(gy, y, [](double v) { return 1.0 - v * v; });
}

Tensor sigmoidForward(const Tensor& x) {
  return mapF64(x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
}
Tensor sigmoidBackward(const Tensor& gy, const Tensor& y) {
  return backwardF64(gy, y, [](double v) { return v * (1.0 - v); });
}

const ActivationKernels kActivation{LOCKSTEP_ACTIVATION_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
