#pragma once
// Owning wrappers of cuDNN's descriptors and the scaling factors its calls take, for the cuDNN-backed
// kernels (conv.cpp). Built with LOCKSTEP_CUDA only.
#include <cudnn.h>

#include <string>

#include "lockstep/kernels/conv.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// cuDNN's data type for t (f32, f64, bf16, f16); NotSupportedError naming `what` otherwise.
cudnnDataType_t dnnType(DType t, const std::string& what);

/// A 4-d tensor descriptor of a dense NCHW (or, with nhwc, NHWC) tensor of logical shape [N, C, H, W].
class TensorDesc {
 public:
  TensorDesc();
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  void set4d(const Shape& s, DType t, bool nhwc, const std::string& what);
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

/// A filter [O, C/groups, kH, kW] in NCHW (contiguous) or NHWC order.
class FilterDesc {
 public:
  FilterDesc();
  ~FilterDesc();
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  void set(const Shape& s, DType t, bool nhwc, const std::string& what);
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

/// A cross-correlation with p's stride, padding, dilation and groups, computing in f32 (f64 for f64).
class ConvDesc {
 public:
  ConvDesc();
  ~ConvDesc();
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  void set(const Conv2dParams& p, DType t, const std::string& what);
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

/// alpha/beta as cuDNN reads them: double for f64 data, float otherwise.
class Scale {
 public:
  Scale(DType t, double v) : f64_(t == DType::f64), d_(v), f_(static_cast<float>(v)) {}
  const void* ptr() const { return f64_ ? static_cast<const void*>(&d_) : static_cast<const void*>(&f_); }

 private:
  bool f64_;
  double d_;
  float f_;
};

}  // namespace lockstep::kernels::cuda
