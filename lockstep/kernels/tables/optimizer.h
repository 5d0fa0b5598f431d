#pragma once
// The optimizer steps of kernels/optimizer.h, as each backend provides them (see
// kernels/dispatch.h). The entry points have checked the spans; the multi-span steps are for spans
// on one device.
#include "lockstep/kernels/optimizer.h"

namespace lockstep::kernels {

struct OptimizerKernels {
  static constexpr const char* kGroup = "optimizer";
  void (*sgdStep)(const SgdSpan& span, const SgdParams& params) = nullptr;
  void (*adamStep)(const AdamSpan& span, const AdamParams& params) = nullptr;
  void (*sgdStepMany)(std::span<const SgdSpan> spans, const SgdParams& params) = nullptr;
  void (*adamStepMany)(std::span<const AdamSpan> spans, const AdamParams& params) = nullptr;
};

namespace cpu {
extern const OptimizerKernels kOptimizer;
}
namespace cuda {
extern const OptimizerKernels kOptimizer;
}

}  // namespace lockstep::kernels
