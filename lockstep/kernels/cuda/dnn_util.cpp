#include "lockstep/kernels/cuda/dnn_util.h"

#include <climits>

#include "lockstep/kernels/cuda/handles.h"

namespace lockstep::kernels::cuda {

namespace {
int asInt(int64_t v, const std::string& what) {
  LOCKSTEP_ENFORCE(v >= 0 && v <= INT_MAX, NotSupportedError, "cuDNN takes sizes below 2^31, got ", v, " in ",
                   what);
  return static_cast<int>(v);
}
}  // namespace

cudnnDataType_t dnnType(DType t, const std::string& what) {
  switch (t) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f16:
      return CUDNN_DATA_HALF;
    default:
      throw NotSupportedError(
          detail::concat("cuDNN takes f32, f64, bf16 or f16 tensors, got ", dtypeName(t), " in ", what));
  }
}

TensorDesc::TensorDesc() {
  LOCKSTEP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_), std::string("a tensor descriptor"));
}
TensorDesc::~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }

void TensorDesc::set4d(const Shape& s, DType t, bool nhwc, const std::string& what) {
  const int n = asInt(s[0], what), c = asInt(s[1], what), h = asInt(s[2], what), w = asInt(s[3], what);
  // Strides of the dense layout (not the tensor's: those of size-1 axes are arbitrary).
  if (nhwc) {
    LOCKSTEP_CUDNN_CHECK(
        cudnnSetTensor4dDescriptorEx(d_, dnnType(t, what), n, c, h, w, asInt(s[1] * s[2] * s[3], what), 1,
                                     asInt(s[3] * s[1], what), c),
        what);
  } else {
    LOCKSTEP_CUDNN_CHECK(
        cudnnSetTensor4dDescriptorEx(d_, dnnType(t, what), n, c, h, w, asInt(s[1] * s[2] * s[3], what),
                                     asInt(s[2] * s[3], what), w, 1),
        what);
  }
}

FilterDesc::FilterDesc() {
  LOCKSTEP_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_), std::string("a filter descriptor"));
}
FilterDesc::~FilterDesc() { cudnnDestroyFilterDescriptor(d_); }

void FilterDesc::set(const Shape& s, DType t, bool nhwc, const std::string& what) {
  LOCKSTEP_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(d_, dnnType(t, what), nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                 asInt(s[0], what), asInt(s[1], what), asInt(s[2], what), asInt(s[3], what)),
      what);
}

ConvDesc::ConvDesc() {
  LOCKSTEP_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_), std::string("a convolution descriptor"));
}
ConvDesc::~ConvDesc() { cudnnDestroyConvolutionDescriptor(d_); }

void ConvDesc::set(const Conv2dParams& p, DType t, const std::string& what) {
  LOCKSTEP_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
                           d_, asInt(p.padding[0], what), asInt(p.padding[1], what), asInt(p.stride[0], what),
                           asInt(p.stride[1], what), asInt(p.dilation[0], what), asInt(p.dilation[1], what),
                           CUDNN_CROSS_CORRELATION, t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
                       what);
  LOCKSTEP_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d_, asInt(p.groups, what)), what);
}

}  // namespace lockstep::kernels::cuda
