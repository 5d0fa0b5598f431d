#pragma once
// Training metrics (kernels/metrics.h), as each backend provides them (see kernels/dispatch.h).
#include "lockstep/kernels/metrics.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_METRICS_OPS(X) \
  X(countCorrectInto, void(const Tensor& logits, const Tensor& target, Tensor& correct))
// clang-format on

struct MetricsKernels {
  static constexpr const char* kGroup = "metrics";
  LOCKSTEP_METRICS_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const MetricsKernels kMetrics;
}
namespace cuda {
extern const MetricsKernels kMetrics;
}

}  // namespace lockstep::kernels
