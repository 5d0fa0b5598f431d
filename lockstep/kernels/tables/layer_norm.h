#pragma once
// layer_norm (kernels/layer_norm.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/layer_norm.h"
#include "lockstep/kernels/tables/table.h"

namespace lockstep::kernels {

// clang-format off
#define LOCKSTEP_LAYER_NORM_OPS(X) \
  X(layerNormForward, LayerNormOutput(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps, DType y_dtype)) \
  X(layerNormBackward, LayerNormGrads(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& variance, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps))
// clang-format on

struct LayerNormKernels {
  static constexpr const char* kGroup = "layer_norm";
  LOCKSTEP_LAYER_NORM_OPS(LOCKSTEP_KERNEL_MEMBER)
};

namespace onednn {
extern const LayerNormKernels kLayerNorm;
}
namespace reference {
extern const LayerNormKernels kLayerNorm;
}
namespace cuda {
extern const LayerNormKernels kLayerNorm;
}

}  // namespace lockstep::kernels
