#include "lockstep/kernels/activation.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/activation.h"

namespace lockstep::kernels {

namespace {

const Backends<ActivationKernels> kBackends{.onednn = &onednn::kActivation,
                                            .cpu = &cpu::kActivation,
                                            .reference = &reference::kActivation,
                                            .cuda = LOCKSTEP_CUDA_TABLE(cuda::kActivation),
                                            .cpu_takes_low_precision = true};

void checkBackward(const char* op, const Tensor& gy, const Tensor& saved) {
  LOCKSTEP_ENFORCE(gy.shape() == saved.shape(), ValueError, op, " backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from the saved tensor's shape ",
                   shapeToString(saved.shape()));
}
}  // namespace

Tensor reluForward(const Tensor& x) { return dispatch<&ActivationKernels::reluForward>(kBackends, x, x); }

Tensor reluBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("relu", gy, y);
  return dispatch<&ActivationKernels::reluBackward>(kBackends, {gy.isCuda() || y.isCuda(), y.dtype()}, gy, y);
}

Tensor leakyReluForward(const Tensor& x, double slope) {
  return dispatch<&ActivationKernels::leakyReluForward>(kBackends, x, x, slope);
}

Tensor leakyReluBackward(const Tensor& gy, const Tensor& x, double slope) {
  checkBackward("leaky_relu", gy, x);
  return dispatch<&ActivationKernels::leakyReluBackward>(kBackends, {gy.isCuda() || x.isCuda(), x.dtype()},
                                                         gy, x, slope);
}

Tensor geluForward(const Tensor& x) { return dispatch<&ActivationKernels::geluForward>(kBackends, x, x); }

Tensor geluBackward(const Tensor& gy, const Tensor& x) {
  checkBackward("gelu", gy, x);
  return dispatch<&ActivationKernels::geluBackward>(kBackends, {gy.isCuda() || x.isCuda(), x.dtype()}, gy, x);
}

Tensor geluTanhForward(const Tensor& x) {
  return dispatch<&ActivationKernels::geluTanhForward>(kBackends, x, x);
}

Tensor geluTanhBackward(const Tensor& gy, const Tensor& x) {
  checkBackward("gelu", gy, x);
  return dispatch<&ActivationKernels::geluTanhBackward>(kBackends, {gy.isCuda() || x.isCuda(), x.dtype()}, gy,
                                                        x);
}

Tensor siluForward(const Tensor& x) { return dispatch<&ActivationKernels::siluForward>(kBackends, x, x); }

Tensor siluBackward(const Tensor& gy, const Tensor& x) {
  checkBackward("silu", gy, x);
  return dispatch<&ActivationKernels::siluBackward>(kBackends, {gy.isCuda() || x.isCuda(), x.dtype()}, gy, x);
}

Tensor tanhForward(const Tensor& x) { return dispatch<&ActivationKernels::tanhForward>(kBackends, x, x); }

Tensor tanhBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("tanh", gy, y);
  return dispatch<&ActivationKernels::tanhBackward>(kBackends, {gy.isCuda() || y.isCuda(), y.dtype()}, gy, y);
}

Tensor sigmoidForward(const Tensor& x) {
  return dispatch<&ActivationKernels::sigmoidForward>(kBackends, x, x);
}

Tensor sigmoidBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("sigmoid", gy, y);
  return dispatch<&ActivationKernels::sigmoidBackward>(kBackends, {gy.isCuda() || y.isCuda(), y.dtype()}, gy,
                                                       y);
}

}  // namespace lockstep::kernels
