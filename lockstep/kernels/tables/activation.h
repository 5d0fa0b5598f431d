#pragma once
// The activations of kernels/activation.h, as each backend provides them (see kernels/dispatch.h).
// A backward takes what its CPU entry point takes: the output y for relu, tanh and sigmoid, the
// input x for the others.
#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_ACTIVATION_OPS(X) \
  X(reluForward, Tensor(const Tensor& x)) \
  X(reluBackward, Tensor(const Tensor& gy, const Tensor& y)) \
  X(leakyReluForward, Tensor(const Tensor& x, double slope)) \
  X(leakyReluBackward, Tensor(const Tensor& gy, const Tensor& x, double slope)) \
  X(geluForward, Tensor(const Tensor& x)) \
  X(geluBackward, Tensor(const Tensor& gy, const Tensor& x)) \
  X(geluTanhForward, Tensor(const Tensor& x)) \
  X(geluTanhBackward, Tensor(const Tensor& gy, const Tensor& x)) \
  X(siluForward, Tensor(const Tensor& x)) \
  X(siluBackward, Tensor(const Tensor& gy, const Tensor& x)) \
  X(tanhForward, Tensor(const Tensor& x)) \
  X(tanhBackward, Tensor(const Tensor& gy, const Tensor& y)) \
  X(sigmoidForward, Tensor(const Tensor& x)) \
  X(sigmoidBackward, Tensor(const Tensor& gy, const Tensor& y))
// clang-format on

struct ActivationKernels {
  static constexpr const char* kGroup = "activation";
  LOCKSTEP_ACTIVATION_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const ActivationKernels kActivation;
}
namespace cpu {
extern const ActivationKernels kActivation;
/// y = relu(y) in place (a dense f32, bf16 or f16 tensor), as torch.relu: what a convolution's
/// fused relu runs after it on the CPU (oneDNN's relu post-op turns a NaN into 0).
void reluInPlace(const Tensor& y);
}  // namespace cpu
namespace reference {
extern const ActivationKernels kActivation;
}
namespace cuda {
extern const ActivationKernels kActivation;
}

}  // namespace lockstep::kernels
