#pragma once
// Layout choice for 4-d activations in the conv/pool/batch-norm kernels: a tensor is treated as
// channels_last (oneDNN nhwc) whenever its strides allow it, which covers every C=1 NCHW tensor,
// and as contiguous (nchw) otherwise. Outputs and input gradients take the same format as the
// forward's input, so a channels_last network never reorders activations between layers.
#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"

namespace lockstep::kernels::onednn {

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

/// oneDNN descriptor for a 4-d tensor laid out in format f (by tag, so size-1 dims never confuse
/// oneDNN's layout matching).
inline dnnl::memory::desc activationDesc(const Shape& shape, DType dtype, MemoryFormat f) {
  return dnnl::memory::desc(
      dnnl::memory::dims(shape.begin(), shape.end()), dataType(dtype),
      f == MemoryFormat::channels_last ? dnnl::memory::format_tag::nhwc : dnnl::memory::format_tag::nchw);
}

/// A one-dimensional f32 descriptor of n elements (bias, mean, variance, scale, shift).
inline dnnl::memory::desc vectorDesc(int64_t n, DType dtype = DType::f32) {
  return dnnl::memory::desc({n}, dataType(dtype), dnnl::memory::format_tag::a);
}

/// A cache-key fragment for a format.
inline const char* formatKey(MemoryFormat f) { return f == MemoryFormat::channels_last ? "L" : "C"; }

}  // namespace lockstep::kernels::onednn
