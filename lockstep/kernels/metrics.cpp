#include "lockstep/kernels/metrics.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/metrics.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

namespace {
const Backends<MetricsKernels> kBackends{.cpu = &cpu::kMetrics, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kMetrics)};
}  // namespace

void countCorrectInto(const Tensor& logits, const Tensor& target, Tensor& correct) {
  LOCKSTEP_ENFORCE(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0), ValueError,
                   "countCorrectInto: expected logits [n, c] and target [n], got ", logits.describe(),
                   " and ", target.describe());
  LOCKSTEP_ENFORCE(isFloating(logits.dtype()) && target.dtype() == DType::i64, ValueError,
                   "countCorrectInto: expected floating logits and an i64 target, got ", logits.describe(),
                   " and ", target.describe());
  LOCKSTEP_ENFORCE(correct.numel() == 1 && correct.dtype() == DType::i64, ValueError,
                   "countCorrectInto: the count must be one i64 element, got ", correct.describe());
  LOCKSTEP_ENFORCE(logits.device() == target.device() && logits.device() == correct.device(), ValueError,
                   "countCorrectInto: operands on different devices, ", logits.describe(), ", ",
                   target.describe(), " and ", correct.describe(), "; move them to one device first");
  dispatchAsIs<&MetricsKernels::countCorrectInto>(kBackends, logits, logits, target, correct);
}

}  // namespace lockstep::kernels
