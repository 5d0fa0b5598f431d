#include "lockstep/kernels/metrics.h"

#include "lockstep/kernels/cuda/metrics.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

void countCorrectInto(const Tensor& logits, const Tensor& target, Tensor& correct) {
  LOCKSTEP_ENFORCE(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0), ValueError,
                   "countCorrectInto: expected logits [n, c] and target [n], got ", logits.describe(), " and ",
                   target.describe());
  LOCKSTEP_ENFORCE(isFloating(logits.dtype()) && target.dtype() == DType::i64, ValueError,
                   "countCorrectInto: expected floating logits and an i64 target, got ", logits.describe(),
                   " and ", target.describe());
  LOCKSTEP_ENFORCE(correct.numel() == 1 && correct.dtype() == DType::i64, ValueError,
                   "countCorrectInto: the count must be one i64 element, got ", correct.describe());
  LOCKSTEP_ENFORCE(logits.device() == target.device() && logits.device() == correct.device(), ValueError,
                   "countCorrectInto: operands on different devices, ", logits.describe(), ", ", target.describe(),
                   " and ", correct.describe(), "; move them to one device first");
  LOCKSTEP_ON_CUDA(logits, cuda::countCorrectInto(logits, target, correct));
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

}  // namespace lockstep::kernels
