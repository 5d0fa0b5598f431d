#pragma once
// sum and mean over dims (kernels/reduce.h), as each backend provides them (see kernels/dispatch.h).
#include "lockstep/kernels/reduce.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_REDUCE_OPS(X) \
  X(reduce, Tensor(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim))
// clang-format on

struct ReduceKernels {
  static constexpr const char* kGroup = "reduce";
  LOCKSTEP_REDUCE_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const ReduceKernels kReduce;
}
namespace reference {
extern const ReduceKernels kReduce;
}
namespace cuda {
extern const ReduceKernels kReduce;
}

}  // namespace lockstep::kernels
