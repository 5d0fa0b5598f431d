#pragma once
// layer_norm (kernels/layer_norm.h), as each backend provides it (see kernels/dispatch.h).
#include "lockstep/kernels/layer_norm.h"

namespace lockstep::kernels {

struct LayerNormKernels {
  static constexpr const char* kGroup = "layer_norm";
  LayerNormOutput (*layerNormForward)(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                      const Tensor& bias, double eps) = nullptr;
  LayerNormGrads (*layerNormBackward)(const Tensor& gy, const Tensor& x, const Tensor& mean,
                                      const Tensor& variance, const Shape& normalized_shape,
                                      const Tensor& weight, const Tensor& bias, double eps) = nullptr;
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
