#pragma once
// The reference kernels compute in plain row-major [N, C, H, W] order; their results take the
// memory format of the input they belong to, as the oneDNN kernels' (and PyTorch's) do.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::reference {

/// t (row-major) converted to like's memory format: channels-last when like is channels-last.
inline Tensor inFormatOf(Tensor t, const Tensor& like) {
  if (t.dim() == 4 && like.dim() == 4 && like.isChannelsLast() && !t.isChannelsLast()) {
    return t.toFormat(MemoryFormat::channels_last);
  }
  return t;
}

}  // namespace lockstep::kernels::reference
