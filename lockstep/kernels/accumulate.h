#pragma once
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// dst += alpha * src, element-wise; same shape (ValueError naming both otherwise), any strides,
/// floating dtypes (src is cast to dst's dtype).
void addInto(Tensor& dst, const Tensor& src, double alpha = 1.0);

}  // namespace lockstep::kernels
