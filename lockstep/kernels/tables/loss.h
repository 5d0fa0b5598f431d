#pragma once
// The losses of kernels/loss.h, as each backend provides them (see kernels/dispatch.h). The CPU
// entry points check class targets before the call; the CUDA kernels check them on the device.
#include "lockstep/kernels/loss.h"

namespace lockstep::kernels {

struct LossKernels {
  static constexpr const char* kGroup = "loss";
  std::pair<Tensor, Tensor> (*crossEntropyForward)(const Tensor& logits, const Tensor& target,
                                                   const CrossEntropyParams& p) = nullptr;
  Tensor (*crossEntropyBackward)(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                                 const Tensor& target, const CrossEntropyParams& p) = nullptr;
  Tensor (*nllLossForward)(const Tensor& log_probs, const Tensor& target, LossReduction reduction,
                           int64_t ignore_index) = nullptr;
  Tensor (*nllLossBackward)(const Tensor& gloss, const Tensor& target, int64_t num_classes,
                            LossReduction reduction, int64_t ignore_index) = nullptr;
  Tensor (*mseLossForward)(const Tensor& input, const Tensor& target, LossReduction reduction) = nullptr;
  Tensor (*mseLossBackward)(const Tensor& gloss, const Tensor& input, const Tensor& target,
                            LossReduction reduction) = nullptr;
};

namespace cpu {
extern const LossKernels kLoss;
}
namespace reference {
extern const LossKernels kLoss;
}
namespace cuda {
extern const LossKernels kLoss;
}

}  // namespace lockstep::kernels
