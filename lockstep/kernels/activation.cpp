#include "lockstep/kernels/activation.h"

#include "lockstep/kernels/cuda/activation.h"
#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

using cuda::Activation;

namespace {

void checkBackward(const char* op, const Tensor& gy, const Tensor& saved) {
  LOCKSTEP_ENFORCE(gy.shape() == saved.shape(), ValueError, op, " backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from the saved tensor's shape ",
                   shapeToString(saved.shape()));
}
}  // namespace

Tensor reluForward(const Tensor& x) {
  LOCKSTEP_ON_CUDA(x, cuda::activationForward(Activation::relu, x));
  return dispatch<onednn::reluForward, reference::reluForward>(x.dtype(), x);
}

Tensor reluBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("relu", gy, y);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : y, cuda::activationBackward(Activation::relu, gy, y));
  return dispatch<onednn::reluBackward, reference::reluBackward>(y.dtype(), gy, y);
}

Tensor leakyReluForward(const Tensor& x, double slope) {
  LOCKSTEP_ON_CUDA(x, cuda::activationForward(Activation::leaky_relu, x, slope));
  return dispatch<onednn::leakyReluForward, reference::leakyReluForward>(x.dtype(), x, slope);
}

Tensor leakyReluBackward(const Tensor& gy, const Tensor& x, double slope) {
  checkBackward("leaky_relu", gy, x);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : x, cuda::activationBackward(Activation::leaky_relu, gy, x, slope));
  return dispatch<onednn::leakyReluBackward, reference::leakyReluBackward>(x.dtype(), gy, x, slope);
}

Tensor geluForward(const Tensor& x) {
  LOCKSTEP_ON_CUDA(x, cuda::activationForward(Activation::gelu, x));
  return dispatch<onednn::geluForward, reference::geluForward>(x.dtype(), x);
}

Tensor geluBackward(const Tensor& gy, const Tensor& x) {
  checkBackward("gelu", gy, x);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : x, cuda::activationBackward(Activation::gelu, gy, x));
  return dispatch<onednn::geluBackward, reference::geluBackward>(x.dtype(), gy, x);
}

Tensor geluTanhForward(const Tensor& x) {
  LOCKSTEP_ON_CUDA(x, cuda::activationForward(Activation::gelu_tanh, x));
  return dispatch<onednn::geluTanhForward, reference::geluTanhForward>(x.dtype(), x);
}

Tensor geluTanhBackward(const Tensor& gy, const Tensor& x) {
  checkBackward("gelu", gy, x);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : x, cuda::activationBackward(Activation::gelu_tanh, gy, x));
  return dispatch<onednn::geluTanhBackward, reference::geluTanhBackward>(x.dtype(), gy, x);
}

Tensor siluForward(const Tensor& x) {
  LOCKSTEP_ON_CUDA(x, cuda::activationForward(Activation::silu, x));
  return dispatch<onednn::siluForward, reference::siluForward>(x.dtype(), x);
}

Tensor siluBackward(const Tensor& gy, const Tensor& x) {
  checkBackward("silu", gy, x);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : x, cuda::activationBackward(Activation::silu, gy, x));
  return dispatch<onednn::siluBackward, reference::siluBackward>(x.dtype(), gy, x);
}

Tensor tanhForward(const Tensor& x) {
  LOCKSTEP_ON_CUDA(x, cuda::activationForward(Activation::tanh, x));
  return dispatch<onednn::tanhForward, reference::tanhForward>(x.dtype(), x);
}

Tensor tanhBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("tanh", gy, y);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : y, cuda::activationBackward(Activation::tanh, gy, y));
  return dispatch<onednn::tanhBackward, reference::tanhBackward>(y.dtype(), gy, y);
}

Tensor sigmoidForward(const Tensor& x) {
  LOCKSTEP_ON_CUDA(x, cuda::activationForward(Activation::sigmoid, x));
  return dispatch<onednn::sigmoidForward, reference::sigmoidForward>(x.dtype(), x);
}

Tensor sigmoidBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("sigmoid", gy, y);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : y, cuda::activationBackward(Activation::sigmoid, gy, y));
  return dispatch<onednn::sigmoidBackward, reference::sigmoidBackward>(y.dtype(), gy, y);
}

}  // namespace lockstep::kernels
