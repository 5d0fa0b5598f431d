#include "lockstep/kernels/softmax.h"

#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

namespace {
bool onDnnl(DType t) { return backendFor(t) == Backend::onednn; }

int64_t checkDim(const char* op, const Tensor& x, int64_t dim) {
  LOCKSTEP_ENFORCE(isFloating(x.dtype()), ValueError, op, ": needs a floating tensor, got ", x.describe());
  return normalizeDim(dim, x.dim(), op);
}

void checkBackward(const char* op, const Tensor& gy, const Tensor& y) {
  LOCKSTEP_ENFORCE(gy.shape() == y.shape(), ValueError, op, " backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from output shape ", shapeToString(y.shape()));
}
}  // namespace

Tensor softmaxForward(const Tensor& x, int64_t dim) {
  int64_t d = checkDim("softmax", x, dim);
  return onDnnl(x.dtype()) ? onednn::softmaxForward(x, d) : reference::softmaxForward(x, d);
}

Tensor softmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  int64_t d = checkDim("softmax", y, dim);
  checkBackward("softmax", gy, y);
  return onDnnl(y.dtype()) ? onednn::softmaxBackward(gy, y, d) : reference::softmaxBackward(gy, y, d);
}

Tensor logSoftmaxForward(const Tensor& x, int64_t dim) {
  int64_t d = checkDim("log_softmax", x, dim);
  return onDnnl(x.dtype()) ? onednn::logSoftmaxForward(x, d) : reference::logSoftmaxForward(x, d);
}

Tensor logSoftmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  int64_t d = checkDim("log_softmax", y, dim);
  checkBackward("log_softmax", gy, y);
  return onDnnl(y.dtype()) ? onednn::logSoftmaxBackward(gy, y, d) : reference::logSoftmaxBackward(gy, y, d);
}

}  // namespace lockstep::kernels
