#include "lockstep/kernels/activation.h"

#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

namespace {
bool onDnnl(DType t) { return backendFor(t) == Backend::onednn; }

void checkBackward(const char* op, const Tensor& gy, const Tensor& saved) {
  LOCKSTEP_ENFORCE(gy.shape() == saved.shape(), ValueError, op, " backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from the saved tensor's shape ",
                   shapeToString(saved.shape()));
}
}  // namespace

Tensor reluForward(const Tensor& x) {
  return onDnnl(x.dtype()) ? onednn::reluForward(x) : reference::reluForward(x);
}

Tensor reluBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("relu", gy, y);
  return onDnnl(y.dtype()) ? onednn::reluBackward(gy, y) : reference::reluBackward(gy, y);
}

Tensor leakyReluForward(const Tensor& x, double slope) {
  return onDnnl(x.dtype()) ? onednn::leakyReluForward(x, slope) : reference::leakyReluForward(x, slope);
}

Tensor leakyReluBackward(const Tensor& gy, const Tensor& x, double slope) {
  checkBackward("leaky_relu", gy, x);
  return onDnnl(x.dtype()) ? onednn::leakyReluBackward(gy, x, slope)
                           : reference::leakyReluBackward(gy, x, slope);
}

Tensor geluForward(const Tensor& x) {
  return onDnnl(x.dtype()) ? onednn::geluForward(x) : reference::geluForward(x);
}

Tensor geluBackward(const Tensor& gy, const Tensor& x) {
  checkBackward("gelu", gy, x);
  return onDnnl(x.dtype()) ? onednn::geluBackward(gy, x) : reference::geluBackward(gy, x);
}

Tensor tanhForward(const Tensor& x) {
  return onDnnl(x.dtype()) ? onednn::tanhForward(x) : reference::tanhForward(x);
}

Tensor tanhBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("tanh", gy, y);
  return onDnnl(y.dtype()) ? onednn::tanhBackward(gy, y) : reference::tanhBackward(gy, y);
}

Tensor sigmoidForward(const Tensor& x) {
  return onDnnl(x.dtype()) ? onednn::sigmoidForward(x) : reference::sigmoidForward(x);
}

Tensor sigmoidBackward(const Tensor& gy, const Tensor& y) {
  checkBackward("sigmoid", gy, y);
  return onDnnl(y.dtype()) ? onednn::sigmoidBackward(gy, y) : reference::sigmoidBackward(gy, y);
}

}  // namespace lockstep::kernels
