#pragma once
// The losses of kernels/loss.h, as each backend provides them (see kernels/dispatch.h). The CPU
// entry points check class targets before the call; the CUDA kernels check them on the device.
#include "lockstep/kernels/loss.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_LOSS_OPS(X) \
  X(crossEntropyForward, std::pair<Tensor, Tensor>(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p)) \
  X(crossEntropyBackward, Tensor(const Tensor& gloss, const Tensor& logits, const Tensor& lse, const Tensor& target, const CrossEntropyParams& p)) \
  X(crossEntropyRowWeights, Tensor(const Tensor& target, int64_t ignore_index, LossReduction reduction, DType dtype)) \
  X(nllLossForward, Tensor(const Tensor& log_probs, const Tensor& target, LossReduction reduction, int64_t ignore_index)) \
  X(nllLossBackward, Tensor(const Tensor& gloss, const Tensor& target, int64_t num_classes, LossReduction reduction, int64_t ignore_index)) \
  X(mseLossForward, Tensor(const Tensor& input, const Tensor& target, LossReduction reduction)) \
  X(mseLossBackward, Tensor(const Tensor& gloss, const Tensor& input, const Tensor& target, LossReduction reduction))
// clang-format on

struct LossKernels {
  static constexpr const char* kGroup = "loss";
  LOCKSTEP_LOSS_OPS(LOCKSTEP_KERNEL_MEMBER)
};

// The losses' forms that write into a given buffer (a GPU's only).
// clang-format off
#define LOCKSTEP_LOSS_INTO_OPS(X) \
  X(crossEntropyBackwardInto, bool(Tensor& out, const Tensor& gloss, const Tensor& logits, const Tensor& lse, const Tensor& target, const CrossEntropyParams& p)) \
  X(crossEntropyWithGradInto, std::pair<Tensor, Tensor>(Tensor& out, const Tensor& row_grad, const Tensor& logits, const Tensor& target, const CrossEntropyParams& p))
// clang-format on

struct LossIntoKernels {
  static constexpr const char* kGroup = "loss into a buffer";
  LOCKSTEP_LOSS_INTO_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const LossKernels kLoss;
}
namespace reference {
extern const LossKernels kLoss;
}
namespace cuda {
extern const LossKernels kLoss;
extern const LossIntoKernels kLossInto;
}  // namespace cuda

}  // namespace lockstep::kernels
