#include "lockstep/kernels/linear.h"

#include <string>
#include <type_traits>

#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/reduce.h"
#include "lockstep/kernels/tables/linear.h"
#include "lockstep/tensor/strided.h"
#include "lockstep/util/env.h"

namespace lockstep::kernels {

namespace {
const Backends<LinearKernels> kBackends{
    .onednn = &onednn::kLinear, .reference = &reference::kLinear, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kLinear)};
const Backends<LinearEpilogueKernels> kEpilogueBackends{.cuda = LOCKSTEP_CUDA_TABLE(cuda::kLinearEpilogue)};
}  // namespace

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

void checkBias(const char* op, const Tensor& weight, const Tensor& bias) {
  if (!bias.defined()) return;
  LOCKSTEP_ENFORCE(bias.dim() == 1 && bias.size(0) == weight.size(0) && bias.dtype() == weight.dtype(),
                   ValueError, op, ": bias ", bias.describe(), " does not match weight ", weight.describe());
}

Tensor transposeLast(const Tensor& t) { return t.transpose(t.dim() - 2, t.dim() - 1); }

// LOCKSTEP_GELU_BACKWARD: how a GPU takes the data gradient through a GELU MLP. "kernel" (the
// default): a plain GEMM, then lockstep's vectorised GELU backward, the bias gradient with the
// weight gradient. "epilogue": one cuBLASLt GEMM with DGELU_BGRAD, which on an H200 ran the
// epilogue as a separate kernel at ~0.9 TB/s, 336 us a GPT-2 layer (docs/gpu.md).
bool dgeluEpilogue() {
  static const bool epilogue = [] {
    const std::string v = env::get("LOCKSTEP_GELU_BACKWARD").value_or("kernel");
    if (v == "kernel" || v.empty()) return false;
    LOCKSTEP_ENFORCE(v == "epilogue", ValueError, "LOCKSTEP_GELU_BACKWARD='", v,
                     "': use kernel (a GEMM, then lockstep's GELU backward; default) or epilogue "
                     "(cuBLASLt's DGELU_BGRAD epilogue)");
    return true;
  }();
  return epilogue;
}
}  // namespace

Tensor linearForward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  checkLinear("linear", x, weight);
  checkBias("linear", weight, bias);
  return dispatch<&LinearKernels::linearForward>(kBackends, x, x, weight, bias);
}

Tensor linearResidualForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& residual) {
  checkLinear("linear+residual", x, weight);
  checkBias("linear+residual", weight, bias);
  Shape want(x.shape().begin(), x.shape().end() - 1);
  want.push_back(weight.size(0));
  LOCKSTEP_ENFORCE(residual.defined() && residual.shape() == want, ValueError, "linear+residual: residual ",
                   residual.defined() ? residual.describe() : std::string("(undefined)"),
                   " is not the layer's output shape ", shapeToString(want));
  LOCKSTEP_ENFORCE(residual.device() == x.device(), ValueError, "linear+residual: residual on ",
                   deviceName(residual.device()), ", input on ", deviceName(x.device()));
  if (x.isCuda() && binaryResultDType(residual.dtype(), x.dtype()) == residual.dtype()) {
    Tensor fused = dispatch<&LinearEpilogueKernels::linearResidualForward>(kEpilogueBackends, x, x, weight,
                                                                           bias, residual);
    if (fused.defined()) return fused;
  }
  return binary(BinaryOp::add, residual, linearForward(x, weight, bias));
}

std::pair<Tensor, Tensor> linearGeluTanhForward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  checkLinear("linear+gelu", x, weight);
  checkBias("linear+gelu", weight, bias);
  if (x.isCuda()) {
    auto fused =
        dispatch<&LinearEpilogueKernels::linearGeluTanhForward>(kEpilogueBackends, x, x, weight, bias);
    if (fused.first.defined()) return fused;
  }
  Tensor z = linearForward(x, weight, bias);
  return {geluTanhForward(z), z};
}

std::pair<Tensor, Tensor> linearBackwardDataGeluTanh(const Tensor& gy, const Tensor& weight, const Tensor& z,
                                                     bool with_bias) {
  LOCKSTEP_ENFORCE(weight.dim() == 2 && gy.dim() >= 1 && gy.size(gy.dim() - 1) == weight.size(0), ValueError,
                   "linear+gelu backward: gradient ", shapeToString(gy.shape()),
                   " does not end in out_features of weight ", shapeToString(weight.shape()));
  Shape want(gy.shape().begin(), gy.shape().end() - 1);
  want.push_back(weight.size(1));
  LOCKSTEP_ENFORCE(z.shape() == want && z.dtype() == gy.dtype() && weight.dtype() == gy.dtype(), ValueError,
                   "linear+gelu backward: pre-activation ", z.describe(), " does not fit gradient ",
                   gy.describe(), " and weight ", weight.describe());
  if (gy.isCuda() && dgeluEpilogue()) {
    auto fused = dispatch<&LinearEpilogueKernels::linearBackwardDataGeluTanh>(kEpilogueBackends, gy, gy,
                                                                              weight, z, with_bias);
    if (fused.first.defined()) return fused;
  }
  return {geluTanhBackward(linearBackwardData(gy, weight), z), Tensor()};
}

Shape checkLinearBackwardData(const Tensor& gy, const Tensor& weight) {
  LOCKSTEP_ENFORCE(weight.dim() == 2 && gy.dim() >= 1 && gy.size(gy.dim() - 1) == weight.size(0), ValueError,
                   "linear backward: gradient ", shapeToString(gy.shape()),
                   " does not end in out_features of weight ", shapeToString(weight.shape()));
  Shape xs(gy.shape().begin(), gy.shape().end() - 1);
  xs.push_back(weight.size(1));
  return xs;
}

Tensor linearBackwardData(const Tensor& gy, const Tensor& weight) {
  checkLinearBackwardData(gy, weight);
  return dispatch<&LinearKernels::linearBackwardData>(kBackends, gy, gy, weight);
}

std::pair<Tensor, Tensor> linearBackwardWeights(const Tensor& gy, const Tensor& x, bool with_bias) {
  Shape lead_gy(gy.shape().begin(), gy.shape().end() - 1), lead_x(x.shape().begin(), x.shape().end() - 1);
  LOCKSTEP_ENFORCE(gy.dim() >= 1 && x.dim() == gy.dim() && lead_gy == lead_x, ValueError,
                   "linear backward: gradient ", shapeToString(gy.shape()), " does not match input ",
                   shapeToString(x.shape()));
  return dispatch<&LinearKernels::linearBackwardWeights>(kBackends, x, gy, x, with_bias);
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
  return dispatch<&LinearKernels::matmul>(kBackends, a, a, b);
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
