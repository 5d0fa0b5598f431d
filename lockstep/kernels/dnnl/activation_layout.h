#pragma once
// oneDNN descriptors for 4-d activations in the formats of lockstep/kernels/layout.h
// (channels_last = nhwc, contiguous = nchw).
#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/layout.h"

namespace lockstep::kernels::onednn {

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
