// Plain loops in double precision: the ground truth the fast kernels are tested against.
#include "lockstep/kernels/reduce.h"

#include <limits>

#include "lockstep/kernels/tables/reduce.h"

namespace lockstep::kernels::reference {

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const char* name = op == ReduceOp::sum ? "sum" : "mean";
  std::vector<bool> mask = reducedMask(dims, x.dim(), name);
  Shape kept = reducedShape(x.shape(), mask, /*keepdim=*/true);
  Tensor xd = x.to(DType::f64).contiguous();
  Tensor acc = Tensor::zeros(kept, DType::f64);
  const Shape acc_strides = contiguousStrides(kept);
  const double* px = xd.data<double>();
  double* pa = acc.data<double>();
  // Walk x in row-major order, carrying its multi-index, and add each element into the output
  // element whose index is the same with reduced dims set to 0.
  Shape idx(x.shape().size(), 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      if (!mask[d]) o += idx[d] * acc_strides[d];
    }
    pa[o] += px[i];
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < x.shape()[d]) break;
      idx[d] = 0;
    }
  }
  if (op == ReduceOp::mean) {
    const int64_t count = x.numel() / std::max<int64_t>(acc.numel(), 1);
    for (int64_t i = 0; i < acc.numel(); ++i) {
      pa[i] = count == 0 ? std::numeric_limits<double>::quiet_NaN() : pa[i] / static_cast<double>(count);
    }
  }
  return acc.view(reducedShape(x.shape(), mask, keepdim)).to(x.dtype());
}

const ReduceKernels kReduce{LOCKSTEP_REDUCE_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
