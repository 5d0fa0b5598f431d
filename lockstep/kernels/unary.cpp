#include "lockstep/kernels/unary.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/unary.h"

namespace lockstep::kernels {

namespace {
const Backends<UnaryKernels> kBackends{
    .cpu = &cpu::kUnary, .reference = &reference::kUnary, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kUnary)};
}  // namespace

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
  return dispatch<&UnaryKernels::unary>(kBackends, x, op, x, p);
}

Tensor unaryBackward(UnaryOp op, const Tensor& gy, const Tensor& saved, double p) {
  LOCKSTEP_ENFORCE(gy.shape() == saved.shape(), ValueError, unaryOpName(op), " backward: gradient shape ",
                   shapeToString(gy.shape()), " differs from the saved tensor's shape ",
                   shapeToString(saved.shape()));
  return dispatch<&UnaryKernels::unaryBackward>(kBackends, {gy.isCuda() || saved.isCuda(), saved.dtype()}, op,
                                                gy, saved, p);
}

}  // namespace lockstep::kernels
