#include "lockstep/kernels/binary.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/binary.h"

namespace lockstep::kernels {

namespace {
const Backends<BinaryKernels> kBackends{
    .onednn = &onednn::kBinary, .reference = &reference::kBinary, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kBinary)};
}  // namespace

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

DType binaryResultDType(DType a, DType b) {
  if (a == b || !isFloating(a) || !isFloating(b)) return a;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;  // f32 with anything narrower, and bf16 with f16
}

Shape checkBinary(BinaryOp op, const Tensor& a, const Tensor& b) {
  LOCKSTEP_ENFORCE(a.defined() && b.defined(), ValueError, binaryOpName(op), ": undefined operand");
  LOCKSTEP_ENFORCE(a.dtype() == b.dtype() || (isFloating(a.dtype()) && isFloating(b.dtype())), ValueError,
                   binaryOpName(op), ": dtypes ", dtypeName(a.dtype()), " and ", dtypeName(b.dtype()),
                   " differ (shapes ", shapeToString(a.shape()), " and ", shapeToString(b.shape()),
                   "); convert one with to() first");
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
  const Shape out = checkBinary(op, a, b);
  const bool cuda = a.isCuda() || b.isCuda();
  if (a.dtype() == b.dtype()) return dispatch<&BinaryKernels::binary>(kBackends, {cuda, a.dtype()}, op, a, b);
  const DType r = binaryResultDType(a.dtype(), b.dtype());
  const bool one_pass = r == DType::f32 && (a.dtype() == r || b.dtype() == r) && a.device() == b.device() &&
                        a.shape() == out && b.shape() == out && a.isDense() && a.strides() == b.strides();
  if (one_pass) return dispatchAsIs<&BinaryKernels::binaryMixed>(kBackends, {cuda, r}, op, a, b);
  return dispatch<&BinaryKernels::binary>(kBackends, {cuda, r}, op, a.dtype() == r ? a : a.to(r),
                                          b.dtype() == r ? b : b.to(r));
}

Tensor binaryScalar(BinaryOp op, const Tensor& a, double s) {
  LOCKSTEP_ENFORCE(a.defined(), ValueError, binaryOpName(op), ": undefined operand");
  checkDivisible(op, a);
  return dispatch<&BinaryKernels::binaryScalar>(kBackends, a, op, a, s);
}

}  // namespace lockstep::kernels
