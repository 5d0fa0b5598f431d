// relu, leaky relu, gelu (exact and tanh), silu, tanh, sigmoid and their backward on a GPU.
#include "lockstep/kernels/cuda/activation.h"
#include "lockstep/kernels/cuda/elementwise.cuh"

namespace lockstep::kernels::cuda {

namespace {

const char* activationName(Activation act) {
  switch (act) {
    case Activation::relu:
      return "relu";
    case Activation::leaky_relu:
      return "leaky_relu";
    case Activation::gelu:
    case Activation::gelu_tanh:
      return "gelu";
    case Activation::silu:
      return "silu";
    case Activation::tanh:
      return "tanh";
    case Activation::sigmoid:
      return "sigmoid";
  }
  return "activation";
}

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluC = 0.79788456080286535588, kGeluA = 0.044715;

template <typename C>
__device__ __forceinline__ C sigmoidOf(C v) {
  return C(1) / (C(1) + dExp(-v));
}

template <typename C>
struct ForwardFn {
  Activation act;
  C slope;
  __device__ C operator()(C v) const {
    switch (act) {
      case Activation::relu:
        return v < C(0) ? C(0) : v;  // NaN and -0.0 pass, as torch.relu
      case Activation::leaky_relu:
        return v > C(0) ? v : slope * v;
      case Activation::gelu:
        return C(0.5) * v * (C(1) + dErf(v * C(kInvSqrt2)));
      case Activation::gelu_tanh:
        return C(0.5) * v * (C(1) + dTanh(C(kGeluC) * (v + C(kGeluA) * v * v * v)));
      case Activation::silu:
        return v * sigmoidOf(v);
      case Activation::tanh:
        return dTanh(v);
      case Activation::sigmoid:
        return sigmoidOf(v);
    }
    return v;
  }
};

// g * dy/dx at s (the output for relu/tanh/sigmoid, the input otherwise).
template <typename C>
struct BackwardFn {
  Activation act;
  C slope;
  __device__ C operator()(C g, C s) const {
    switch (act) {
      case Activation::relu:
        return s <= C(0) ? C(0) : g;  // a NaN output passes g, as torch's threshold_backward
      case Activation::leaky_relu:
        return s > C(0) ? g : g * slope;
      case Activation::gelu:
        return g * (C(0.5) * (C(1) + dErf(s * C(kInvSqrt2))) + s * C(kInvSqrt2Pi) * dExp(C(-0.5) * s * s));
      case Activation::gelu_tanh: {
        const C t = dTanh(C(kGeluC) * (s + C(kGeluA) * s * s * s));
        return g * (C(0.5) * (C(1) + t) +
                    C(0.5) * s * (C(1) - t * t) * C(kGeluC) * (C(1) + C(3 * kGeluA) * s * s));
      }
      case Activation::silu: {
        const C sg = sigmoidOf(s);
        return g * (sg + s * sg * (C(1) - sg));
      }
      case Activation::tanh:
        return g * (C(1) - s * s);
      case Activation::sigmoid:
        return g * s * (C(1) - s);
    }
    return g;
  }
};

}  // namespace

Tensor activationForward(Activation act, const Tensor& x, double slope) {
  Tensor y = Tensor::emptyLike(x);
  visitFloating(activationName(act), x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    launchMap<T, 1>(y, {x}, ForwardFn<C>{act, static_cast<C>(slope)});
  });
  return y;
}

Tensor activationBackward(Activation act, const Tensor& gy, const Tensor& saved, double slope) {
  checkSameDevice(activationName(act), gy, saved);
  Tensor gx = Tensor::emptyLike(saved);
  const Tensor g = gy.dtype() == saved.dtype() ? gy : gy.to(saved.dtype());
  visitFloating(activationName(act), saved.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    launchMap<T, 2>(gx, {g, saved}, BackwardFn<C>{act, static_cast<C>(slope)});
  });
  return gx;
}

}  // namespace lockstep::kernels::cuda
