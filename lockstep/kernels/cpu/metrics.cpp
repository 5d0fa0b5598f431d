// The cpu backend's metrics: top-1 hits counted on the host (see kernels/dispatch.h).
#include "lockstep/kernels/metrics.h"

#include "lockstep/kernels/tables/metrics.h"

namespace lockstep::kernels::cpu {

namespace {

void countCorrectInto(const Tensor& logits, const Tensor& target, Tensor& correct) {
  const Tensor l = logits.to(DType::f32).contiguous();
  const Tensor t = target.contiguous();
  const float* p = l.data<float>();
  const int64_t* tp = t.data<int64_t>();
  const int64_t n = l.size(0), classes = l.size(1);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < classes; ++j) {
      if (p[i * classes + j] > p[i * classes + best]) best = j;
    }
    count += best == tp[i];
  }
  *static_cast<int64_t*>(correct.dataPtr()) += count;
}

}  // namespace

const MetricsKernels kMetrics{LOCKSTEP_METRICS_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::cpu
