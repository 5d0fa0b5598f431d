#include "lockstep/kernels/softmax.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/softmax.h"

namespace lockstep::kernels {

namespace {

const Backends<SoftmaxKernels> kBackends{.onednn = &onednn::kSoftmax,
                                         .reference = &reference::kSoftmax,
                                         .cuda = LOCKSTEP_CUDA_TABLE(cuda::kSoftmax)};

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
  return dispatch<&SoftmaxKernels::softmaxForward>(kBackends, x, x, d);
}

Tensor softmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  int64_t d = checkDim("softmax", y, dim);
  checkBackward("softmax", gy, y);
  return dispatch<&SoftmaxKernels::softmaxBackward>(kBackends, {gy.isCuda() || y.isCuda(), y.dtype()}, gy, y,
                                                    d);
}

Tensor logSoftmaxForward(const Tensor& x, int64_t dim) {
  int64_t d = checkDim("log_softmax", x, dim);
  return dispatch<&SoftmaxKernels::logSoftmaxForward>(kBackends, x, x, d);
}

Tensor logSoftmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  int64_t d = checkDim("log_softmax", y, dim);
  checkBackward("log_softmax", gy, y);
  return dispatch<&SoftmaxKernels::logSoftmaxBackward>(kBackends, {gy.isCuda() || y.isCuda(), y.dtype()}, gy,
                                                       y, d);
}

}  // namespace lockstep::kernels
