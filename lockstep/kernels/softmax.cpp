#include "lockstep/kernels/softmax.h"

#include "lockstep/kernels/cuda/softmax.h"
#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

namespace {

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
  LOCKSTEP_ON_CUDA(x, cuda::softmaxForward(x, d, false));
  return dispatch<onednn::softmaxForward, reference::softmaxForward>(x.dtype(), x, d);
}

Tensor softmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  int64_t d = checkDim("softmax", y, dim);
  checkBackward("softmax", gy, y);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : y, cuda::softmaxBackward(gy, y, d, false));
  return dispatch<onednn::softmaxBackward, reference::softmaxBackward>(y.dtype(), gy, y, d);
}

Tensor logSoftmaxForward(const Tensor& x, int64_t dim) {
  int64_t d = checkDim("log_softmax", x, dim);
  LOCKSTEP_ON_CUDA(x, cuda::softmaxForward(x, d, true));
  return dispatch<onednn::logSoftmaxForward, reference::logSoftmaxForward>(x.dtype(), x, d);
}

Tensor logSoftmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  int64_t d = checkDim("log_softmax", y, dim);
  checkBackward("log_softmax", gy, y);
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : y, cuda::softmaxBackward(gy, y, d, true));
  return dispatch<onednn::logSoftmaxBackward, reference::logSoftmaxBackward>(y.dtype(), gy, y, d);
}

}  // namespace lockstep::kernels
