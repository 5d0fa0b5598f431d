#include "lockstep/kernels/linear.h"

#include <type_traits>

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/reduce.h"
#include "lockstep/tensor/strided.h"
#if LOCKSTEP_WITH_CUDA
#include "lockstep/kernels/cuda/blas.h"
#endif

namespace lockstep::kernels {

namespace {

void checkLinear(const char* op, const Tensor& x, const Tensor& weight) {
  LOCKSTEP_ENFORCE(weight.dim() == 2, ValueError, op, ": weight must be [out, in], got ",
                   shapeToString(weight.shape()));
  LOCKSTEP_ENFORCE(x.dim() >= 1 && x.size(x.dim() - 1) == weight.size(1), ValueError, op, ": input ",
                   shapeToString(x.shape()), " does not end in in_features of weight ",
                   shapeToString(weight.shape()));
  LOCKSTEP_ENFORCE(x.dtype() == weight.dtype(), ValueError, op, ": input dtype ", dtypeName(x.dtype()),
                   " differs from weight dtype ", dtypeName(weight.dtype()));
}

Tensor transposeLast(const Tensor& t) { return t.transpose(t.dim() - 2, t.dim() - 1); }
}  // namespace

Tensor linearForward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  checkLinear("linear", x, weight);
  if (bias.defined()) {
    LOCKSTEP_ENFORCE(bias.dim() == 1 && bias.size(0) == weight.size(0) && bias.dtype() == weight.dtype(),
                     ValueError, "linear: bias ", bias.describe(), " does not match weight ",
                     weight.describe());
  }
  LOCKSTEP_ON_CUDA(x, cuda::linearForward(x, weight, bias));
  return dispatch<onednn::linearForward, reference::linearForward>(x.dtype(), x, weight, bias);
}

Tensor linearBackwardData(const Tensor& gy, const Tensor& weight) {
  LOCKSTEP_ENFORCE(weight.dim() == 2 && gy.dim() >= 1 && gy.size(gy.dim() - 1) == weight.size(0), ValueError,
                   "linear backward: gradient ", shapeToString(gy.shape()),
                   " does not end in out_features of weight ", shapeToString(weight.shape()));
  LOCKSTEP_ON_CUDA(gy, cuda::linearBackwardData(gy, weight));
  return dispatch<onednn::linearBackwardData, reference::linearBackwardData>(gy.dtype(), gy, weight);
}

std::pair<Tensor, Tensor> linearBackwardWeights(const Tensor& gy, const Tensor& x, bool with_bias) {
  Shape lead_gy(gy.shape().begin(), gy.shape().end() - 1), lead_x(x.shape().begin(), x.shape().end() - 1);
  LOCKSTEP_ENFORCE(gy.dim() >= 1 && x.dim() == gy.dim() && lead_gy == lead_x, ValueError,
                   "linear backward: gradient ", shapeToString(gy.shape()), " does not match input ",
                   shapeToString(x.shape()));
  LOCKSTEP_ON_CUDA(x, cuda::linearBackwardWeights(gy, x, with_bias));
  return dispatch<onednn::linearBackwardWeights, reference::linearBackwardWeights>(x.dtype(), gy, x,
                                                                                   with_bias);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  LOCKSTEP_ENFORCE(a.dim() >= 2 && b.dim() >= 2, ValueError, "matmul: operands need >= 2 dims, got ",
                   shapeToString(a.shape()), " and ", shapeToString(b.shape()));
  LOCKSTEP_ENFORCE(a.size(a.dim() - 1) == b.size(b.dim() - 2), ValueError, "matmul: shapes ",
                   shapeToString(a.shape()), " and ", shapeToString(b.shape()), " cannot be multiplied");
  LOCKSTEP_ENFORCE(a.dtype() == b.dtype(), ValueError, "matmul: dtypes ", dtypeName(a.dtype()), " and ",
                   dtypeName(b.dtype()), " differ");
  broadcastShapes(Shape(a.shape().begin(), a.shape().end() - 2),
                  Shape(b.shape().begin(), b.shape().end() - 2), "matmul");
  LOCKSTEP_ON_CUDA(a, cuda::matmul(a, b));
  return dispatch<onednn::matmul, reference::matmul>(a.dtype(), a, b);
}

std::pair<Tensor, Tensor> matmulBackward(const Tensor& gy, const Tensor& a, const Tensor& b, bool need_a,
                                         bool need_b) {
  Tensor ga, gb;
  if (need_a) ga = sumToShape(matmul(gy, transposeLast(b)), a.shape());
  if (need_b) {
    if (b.dim() == 2 && a.dim() > 2) {
      // Every batch shares b: one GEMM over the flattened batch instead of a batched GEMM + reduction.
      const int64_t k = a.size(a.dim() - 1), n = b.size(1);
      gb = matmul(transposeLast(a.reshape({-1, k})), gy.reshape({-1, n}));
    } else {
      gb = sumToShape(matmul(transposeLast(a), gy), b.shape());
    }
  }
  return {ga, gb};
}

}  // namespace lockstep::kernels
