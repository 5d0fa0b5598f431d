#include "lockstep/kernels/binary.h"

#include "lockstep/kernels/cuda/elementwise.h"
#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

const char* binaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
  }
  return "binary";
}

Shape checkBinary(BinaryOp op, const Tensor& a, const Tensor& b) {
  LOCKSTEP_ENFORCE(a.defined() && b.defined(), ValueError, binaryOpName(op), ": undefined operand");
  LOCKSTEP_ENFORCE(a.dtype() == b.dtype(), ValueError, binaryOpName(op), ": dtypes ", dtypeName(a.dtype()),
                   " and ", dtypeName(b.dtype()), " differ (shapes ", shapeToString(a.shape()), " and ",
                   shapeToString(b.shape()), "); convert one with to() first");
  checkDivisible(op, a);
  return broadcastShapes(a.shape(), b.shape(), binaryOpName(op));
}

void checkDivisible(BinaryOp op, const Tensor& a) {
  // Integer division would need a rounding rule and a divide-by-zero policy; nothing needs it yet.
  LOCKSTEP_ENFORCE(op != BinaryOp::div || isFloating(a.dtype()), ValueError, "div: dtype ",
                   dtypeName(a.dtype()),
                   " is not supported (integer division); convert to a floating dtype with to() first");
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  checkBinary(op, a, b);
  LOCKSTEP_ON_CUDA(a.isCuda() ? a : b, cuda::binary(op, a, b));
  return dispatch<onednn::binary, reference::binary>(a.dtype(), op, a, b);
}

Tensor binaryScalar(BinaryOp op, const Tensor& a, double s) {
  LOCKSTEP_ENFORCE(a.defined(), ValueError, binaryOpName(op), ": undefined operand");
  checkDivisible(op, a);
  LOCKSTEP_ON_CUDA(a, cuda::binaryScalar(op, a, s));
  return dispatch<onednn::binaryScalar, reference::binaryScalar>(a.dtype(), op, a, s);
}

}  // namespace lockstep::kernels
