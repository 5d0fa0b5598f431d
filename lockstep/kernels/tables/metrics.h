#pragma once
// Training metrics (kernels/metrics.h), as each backend provides them (see kernels/dispatch.h).
#include "lockstep/kernels/metrics.h"

namespace lockstep::kernels {

struct MetricsKernels {
  static constexpr const char* kGroup = "metrics";
  void (*countCorrectInto)(const Tensor& logits, const Tensor& target, Tensor& correct) = nullptr;
};

namespace cpu {
extern const MetricsKernels kMetrics;
}
namespace cuda {
extern const MetricsKernels kMetrics;
}

}  // namespace lockstep::kernels
