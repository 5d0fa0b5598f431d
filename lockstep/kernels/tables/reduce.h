#pragma once
// sum and mean over dims (kernels/reduce.h), as each backend provides them (see kernels/dispatch.h).
#include "lockstep/kernels/reduce.h"

namespace lockstep::kernels {

struct ReduceKernels {
  static constexpr const char* kGroup = "reduce";
  Tensor (*reduce)(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) = nullptr;
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
