#pragma once
// The optimizer steps of kernels/optimizer.h, as each backend provides them (see
// kernels/dispatch.h). The entry points have checked the spans; the multi-span steps are for spans
// on one device.
#include "lockstep/kernels/optimizer.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_OPTIMIZER_OPS(X) \
  X(sgdStep, void(const SgdSpan& span, const SgdParams& params)) \
  X(adamStep, void(const AdamSpan& span, const AdamParams& params)) \
  X(sgdStepMany, void(std::span<const SgdSpan> spans, const SgdParams& params)) \
  X(adamStepMany, void(std::span<const AdamSpan> spans, const AdamParams& params))
// clang-format on

struct OptimizerKernels {
  static constexpr const char* kGroup = "optimizer";
  LOCKSTEP_OPTIMIZER_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const OptimizerKernels kOptimizer;
}
namespace cuda {
extern const OptimizerKernels kOptimizer;
}

}  // namespace lockstep::kernels
