#pragma once
// The activations of kernels/activation.h, as each backend provides them (see kernels/dispatch.h).
// A backward takes what its CPU entry point takes: the output y for relu, tanh and sigmoid, the
// input x for the others.
#include "lockstep/kernels/activation.h"

namespace lockstep::kernels {

struct ActivationKernels {
  static constexpr const char* kGroup = "activation";
  Tensor (*reluForward)(const Tensor& x) = nullptr;
  Tensor (*reluBackward)(const Tensor& gy, const Tensor& y) = nullptr;
  Tensor (*leakyReluForward)(const Tensor& x, double slope) = nullptr;
  Tensor (*leakyReluBackward)(const Tensor& gy, const Tensor& x, double slope) = nullptr;
  Tensor (*geluForward)(const Tensor& x) = nullptr;
  Tensor (*geluBackward)(const Tensor& gy, const Tensor& x) = nullptr;
  Tensor (*geluTanhForward)(const Tensor& x) = nullptr;
  Tensor (*geluTanhBackward)(const Tensor& gy, const Tensor& x) = nullptr;
  Tensor (*siluForward)(const Tensor& x) = nullptr;
  Tensor (*siluBackward)(const Tensor& gy, const Tensor& x) = nullptr;
  Tensor (*tanhForward)(const Tensor& x) = nullptr;
  Tensor (*tanhBackward)(const Tensor& gy, const Tensor& y) = nullptr;
  Tensor (*sigmoidForward)(const Tensor& x) = nullptr;
  Tensor (*sigmoidBackward)(const Tensor& gy, const Tensor& y) = nullptr;
};

namespace onednn {
extern const ActivationKernels kActivation;
}
namespace cpu {
extern const ActivationKernels kActivation;
}
namespace reference {
extern const ActivationKernels kActivation;
}
namespace cuda {
extern const ActivationKernels kActivation;
}

}  // namespace lockstep::kernels
