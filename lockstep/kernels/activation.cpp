#include "lockstep/kernels/activation.h"

#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

Tensor reluForward(const Tensor& x) {
  return backendFor(x.dtype()) == Backend::onednn ? onednn::reluForward(x) : reference::reluForward(x);
}

Tensor reluBackward(const Tensor& gy, const Tensor& y) {
  LOCKSTEP_ENFORCE(gy.shape() == y.shape(), ValueError, "relu backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from output shape ", shapeToString(y.shape()));
  return backendFor(y.dtype()) == Backend::onednn ? onednn::reluBackward(gy, y) : reference::reluBackward(gy, y);
}

}  // namespace lockstep::kernels
