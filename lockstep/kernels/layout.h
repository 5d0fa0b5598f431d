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

/// t when it covers its elements without gaps in some dimension order, else a contiguous copy: what
/// element-wise kernels read as one flat buffer.
inline Tensor dense(const Tensor& t) { return t.isDense() ? t : t.contiguous(); }

/// t's values laid out with like's strides and dtype (t itself when it already is), so that two
/// operands read as flat buffers pair the same elements.
inline Tensor laidOutLike(const Tensor& t, const Tensor& like) {
  if (t.strides() == like.strides() && t.dtype() == like.dtype()) return t;
  Tensor out = Tensor::emptyLike(like);
  out.copyFrom(t);
  return out;
}

}  // namespace lockstep::kernels
