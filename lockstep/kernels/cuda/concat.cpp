#include "lockstep/kernels/cuda/concat.h"

namespace lockstep::kernels::cuda {

Tensor concat(const std::vector<Tensor>& xs, int64_t d, const Shape& out) {
  for (const Tensor& x : xs) {
    LOCKSTEP_ENFORCE(x.device() == xs[0].device(), ValueError, "concat: operands on different devices, ",
                     xs[0].describe(), " and ", x.describe(),
                     "; move them to one device with to(device) first");
  }
  Tensor y = Tensor::empty(out, xs[0].dtype(), MemoryFormat::contiguous, xs[0].device());
  int64_t start = 0;
  for (const Tensor& x : xs) {
    // Each input lands in its slab of y: a strided device copy (tensor/cuda/copy.cu), any layout.
    if (x.size(d) > 0) y.narrow(d, start, x.size(d)).copyFrom(x);
    start += x.size(d);
  }
  return y;
}

}  // namespace lockstep::kernels::cuda
