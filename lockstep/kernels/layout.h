#pragma once
// Layout of 4-d activations in the conv/pool/batch-norm kernels (oneDNN and reference alike): a
// tensor is treated as channels_last whenever its strides allow it, which covers every C=1 NCHW
// tensor, and as contiguous otherwise. Outputs and input gradients take the format of the forward's
// input, so a channels_last network never reorders activations between layers.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// The format an activation is computed in.
inline MemoryFormat formatOf(const Tensor& t) {
  return t.isChannelsLast() ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

/// t itself when already dense in format f, else a copy that is (the only reorder, and only for
/// callers that hand over a differently laid out tensor).
inline Tensor inFormat(const Tensor& t, MemoryFormat f) {
  if (f == MemoryFormat::channels_last) return t.isChannelsLast() ? t : t.toFormat(f);
  return t.isContiguous() ? t : t.contiguous();
}

}  // namespace lockstep::kernels
