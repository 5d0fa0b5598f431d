#include "lockstep/kernels/unary.h"

#include "lockstep/kernels/cuda/elementwise.h"
#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

const char* unaryOpName(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
      return "neg";
    case UnaryOp::exp:
      return "exp";
    case UnaryOp::log:
      return "log";
    case UnaryOp::sqrt:
      return "sqrt";
    case UnaryOp::pow:
      return "pow";
  }
  return "unary";
}

bool unaryBackwardUsesOutput(UnaryOp op) { return op == UnaryOp::exp || op == UnaryOp::sqrt; }

Tensor unary(UnaryOp op, const Tensor& x, double p) {
  LOCKSTEP_ENFORCE(x.defined(), ValueError, unaryOpName(op), ": undefined operand");
  LOCKSTEP_ON_CUDA(x, cuda::unary(op, x, p));
  return dispatch<onednn::unary, reference::unary>(x.dtype(), op, x, p);
}

Tensor unaryBackward(UnaryOp op, const Tensor& gy, const Tensor& saved, double p) {
  LOCKSTEP_ENFORCE(gy.shape() == saved.shape(), ValueError, unaryOpName(op), " backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from the saved tensor's shape ",
                   shapeToString(saved.shape()));
  LOCKSTEP_ON_CUDA(gy.isCuda() ? gy : saved, cuda::unaryBackward(op, gy, saved, p));
  return dispatch<onednn::unaryBackward, reference::unaryBackward>(saved.dtype(), op, gy, saved, p);
}

}  // namespace lockstep::kernels
