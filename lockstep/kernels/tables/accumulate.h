#pragma once
// In-place accumulation (kernels/accumulate.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_ACCUMULATE_OPS(X) \
  X(addInto, void(Tensor& dst, const Tensor& src, double alpha))

// The fused forms (only the CUDA backend has them; the front end has checked shapes, dtypes and
// devices, and gx's layout is the backend's to check).
#define LOCKSTEP_GRAD_INTO_OPS(X) \
  X(conv2dBackwardDataInto, bool(Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p)) \
  X(linearBackwardDataInto, bool(Tensor& gx, const Tensor& gy, const Tensor& weight)) \
  X(layerNormBackwardInto, std::optional<LayerNormGrads>(Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& variance, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps)) \
  X(rmsNormBackwardInto, std::optional<RmsNormGrads>(Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& rstd, const Tensor& weight))
// clang-format on

struct AccumulateKernels {
  static constexpr const char* kGroup = "addInto";
  LOCKSTEP_ACCUMULATE_OPS(LOCKSTEP_KERNEL_MEMBER)
};

struct GradIntoKernels {
  static constexpr const char* kGroup = "gradient accumulation";
  LOCKSTEP_GRAD_INTO_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace cpu {
extern const AccumulateKernels kAccumulate;
}
namespace cuda {
extern const AccumulateKernels kAccumulate;
extern const GradIntoKernels kGradInto;
}  // namespace cuda

}  // namespace lockstep::kernels
