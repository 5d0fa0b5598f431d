#pragma once
// batch_norm2d (kernels/batch_norm.h), as each backend provides it (see kernels/dispatch.h). The CPU
// kernels leave the running statistics to the entry point; the CUDA ones update them on the device.
// Every backend takes a residual and p.relu: lockstep's own (cpu, CUDA) in the normalisation's
// passes, oneDNN's as its binary primitive and the cpu loops' relu after it, the reference in its loops.
#include "lockstep/kernels/batch_norm.h"
#include "lockstep/kernels/tables/activation.h"
#include "lockstep/kernels/tables/binary.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_BATCH_NORM_OPS(X) \
  X(batchNorm2dForward, BatchNormResult(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var, const Tensor& residual, const BatchNormParams& p)) \
  X(batchNorm2dBackward, BatchNormGrads(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias, const Tensor& mean, const Tensor& var, const Tensor& y, bool with_residual, const BatchNormParams& p))
// clang-format on

struct BatchNormKernels {
  static constexpr const char* kGroup = "batch_norm2d";
  LOCKSTEP_BATCH_NORM_OPS(LOCKSTEP_KERNEL_MEMBER)
};

/// The table of a backend whose normalisation takes no residual and no relu (oneDNN's, the
/// reference's): its plain kernels, Normalise(x, weight, bias, running_mean, running_var, p) and
/// NormaliseBackward(g, x, weight, with_bias, mean, var, p), with its own add and relu after them
/// (forward) and the relu's mask before them (backward), so the values are the composed ops'.
template <auto Normalise, auto NormaliseBackward, const BinaryKernels& Binary, const ActivationKernels& Act>
struct ComposedBatchNorm {
  static BatchNormResult forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 const Tensor& residual, const BatchNormParams& p) {
    BatchNormResult r = Normalise(x, weight, bias, running_mean, running_var, p);
    if (residual.defined()) r.y = Binary.binary(BinaryOp::add, r.y, residual);
    if (p.relu) r.y = Act.reluForward(r.y);
    return r;
  }
  static BatchNormGrads backward(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias,
                                 const Tensor& mean, const Tensor& var, const Tensor& y, bool with_residual,
                                 const BatchNormParams& p) {
    const Tensor g = p.relu ? Act.reluBackward(gy, y) : gy;
    BatchNormGrads r = NormaliseBackward(g, x, weight, with_bias, mean, var, p);
    if (with_residual) r.residual = g;
    return r;
  }
  static constexpr BatchNormKernels table() {
    return {.batchNorm2dForward = &forward, .batchNorm2dBackward = &backward};
  }
};

namespace onednn {
extern const BatchNormKernels kBatchNorm;
}
namespace cpu {
extern const BatchNormKernels kBatchNorm;
}
namespace reference {
extern const BatchNormKernels kBatchNorm;
}
namespace cuda {
extern const BatchNormKernels kBatchNorm;
}

}  // namespace lockstep::kernels
