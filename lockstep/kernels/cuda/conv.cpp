#include "lockstep/kernels/cuda/conv.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lockstep/kernels/cuda/channel.h"
#include "lockstep/kernels/cuda/dnn_util.h"
#include "lockstep/kernels/cuda/handles.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

enum class Pass { forward, data, filter };

// The descriptors of one convolution problem.
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  std::string what;
  std::vector<int64_t> key;
  ConvDescs(const char* op, const Shape& xs, const Shape& ws, const Conv2dParams& p, DType t, bool nhwc,
            const Device& device);
};

ConvDescs::ConvDescs(const char* op, const Shape& xs, const Shape& ws, const Conv2dParams& p, DType t,
                     bool nhwc, const Device& device) {
  ConvDescs& d = *this;
  const Shape ys = conv2dOutputShape(xs, ws, p);
  d.what = detail::concat(op, " (input ", shapeToString(xs), nhwc ? " channels_last" : "", ", weight ",
                          shapeToString(ws), ", stride ", p.stride[0], "x", p.stride[1], ", padding ",
                          p.padding[0], "x", p.padding[1], ", dilation ", p.dilation[0], "x", p.dilation[1],
                          ", groups ", p.groups, ", ", dtypeName(t), ", ", deviceName(device), ")");
  d.x.set4d(xs, t, nhwc, d.what);
  d.y.set4d(ys, t, nhwc, d.what);
  d.w.set(ws, t, nhwc, d.what);
  d.conv.set(p, t, d.what);
  d.key = {device.index,  static_cast<int64_t>(t),
           nhwc,          xs[0],
           xs[1],         xs[2],
           xs[3],         ws[0],
           ws[2],         ws[3],
           p.stride[0],   p.stride[1],
           p.padding[0],  p.padding[1],
           p.dilation[0], p.dilation[1],
           p.groups};
}

// cuDNN's heuristic choice for a pass: the first algorithm it ranks that it can run, with its math
// type and workspace, looked up once per problem.
struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

template <typename Perf, typename Query>
Choice pickFrom(Query query, const std::string& what) {
  Perf perf[16];
  int returned = 0;
  LOCKSTEP_CUDNN_CHECK(query(16, &returned, perf), what);
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      return {static_cast<int>(perf[i].algo), perf[i].mathType, perf[i].memory};
    }
  }
  throw NotSupportedError("cuDNN has no algorithm for " + what);
}

Choice choose(Pass pass, cudnnHandle_t h, ConvDescs& d) {
  static std::mutex mutex;
  static auto* chosen = new std::map<std::vector<int64_t>, Choice>();
  std::vector<int64_t> key = d.key;
  key.push_back(static_cast<int64_t>(pass));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = chosen->find(key);
  if (it != chosen->end()) return it->second;
  Choice c;
  if (pass == Pass::forward) {
    c = pickFrom<cudnnConvolutionFwdAlgoPerf_t>(
        [&](int n, int* got, cudnnConvolutionFwdAlgoPerf_t* perf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), n,
                                                        got, perf);
        },
        d.what);
  } else if (pass == Pass::data) {
    c = pickFrom<cudnnConvolutionBwdDataAlgoPerf_t>(
        [&](int n, int* got, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                             n, got, perf);
        },
        d.what);
  } else {
    c = pickFrom<cudnnConvolutionBwdFilterAlgoPerf_t>(
        [&](int n, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(),
                                                               d.w.get(), n, got, perf);
        },
        d.what);
  }
  chosen->emplace(key, c);
  return c;
}

// The layout cuDNN computes in, and the results' layout: NHWC for a channels_last x that is not also
// contiguous (a C = 1 or 1x1 input stays NCHW, as PyTorch's suggest_memory_format has it), NCHW
// otherwise; f64 always NCHW (cuDNN's f64 kernels are NCHW ones; the CPU reference returns
// contiguous tensors too).
MemoryFormat computeFormat(const Tensor& x) {
  const bool nhwc = x.dtype() != DType::f64 && x.isChannelsLast() && !x.isContiguous();
  return nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

// The weight in the filter order cuDNN is told (NHWC with an NHWC input).
Tensor filterOf(const Tensor& w, bool nhwc) {
  return inFormat(w, nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous);
}

}  // namespace

Tensor conv2dInput(const Tensor& x) { return inFormat(x, computeFormat(x)); }

Tensor conv2dForward(const Tensor& x0, const Tensor& w0, const Tensor& b, const Conv2dParams& p) {
  checkSameDevice("conv2d", x0, w0, b);
  const Tensor x = conv2dInput(x0);
  const bool nhwc = computeFormat(x) == MemoryFormat::channels_last;
  const Tensor w = filterOf(w0, nhwc);
  const Shape ys = conv2dOutputShape(x.shape(), w.shape(), p);
  Tensor y =
      Tensor::empty(ys, x.dtype(), nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous, x.device());
  if (y.numel() == 0) return y;
  ConvDescs d("conv2d", x.shape(), w.shape(), p, x.dtype(), nhwc, x.device());
  const rt::Stream stream = rt::currentStream(x.device().index);
  cudnnHandle_t h = dnnHandle(stream);
  const Choice c = choose(Pass::forward, h, d);
  LOCKSTEP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), c.math), d.what);
  Tensor ws = scratch(c.workspace, x.device());
  const Scale one(x.dtype(), 1), zero(x.dtype(), 0);
  LOCKSTEP_CUDNN_CHECK(
      cudnnConvolutionForward(h, one.ptr(), d.x.get(), x.devicePtr(), d.w.get(), w.devicePtr(), d.conv.get(),
                              static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws.devicePtr(), c.workspace,
                              zero.ptr(), d.y.get(), y.devicePtr()),
      d.what);
  addChannelBias(y, b, p.fuse_relu);
  return y;
}

Tensor conv2dBackwardData(const Tensor& gy0, const Tensor& x0, const Tensor& w0, const Conv2dParams& p) {
  checkSameDevice("conv2d backward", gy0, x0, w0);
  const Tensor x = conv2dInput(x0);
  const bool nhwc = computeFormat(x) == MemoryFormat::channels_last;
  const Tensor w = filterOf(w0, nhwc), gy = inFormat(gy0, computeFormat(x));
  Tensor gx = Tensor::empty(x.shape(), x.dtype(),
                            nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous, x.device());
  if (gx.numel() == 0) return gx;
  if (gy.numel() == 0 || w.numel() == 0) {
    gx.zero();
    return gx;
  }
  ConvDescs d("conv2d backward (data)", x.shape(), w.shape(), p, x.dtype(), nhwc, x.device());
  const rt::Stream stream = rt::currentStream(x.device().index);
  cudnnHandle_t h = dnnHandle(stream);
  const Choice c = choose(Pass::data, h, d);
  LOCKSTEP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), c.math), d.what);
  Tensor ws = scratch(c.workspace, x.device());
  const Scale one(x.dtype(), 1), zero(x.dtype(), 0);
  LOCKSTEP_CUDNN_CHECK(
      cudnnConvolutionBackwardData(h, one.ptr(), d.w.get(), w.devicePtr(), d.y.get(), gy.devicePtr(),
                                   d.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                   ws.devicePtr(), c.workspace, zero.ptr(), d.x.get(), gx.devicePtr()),
      d.what);
  return gx;
}

Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy0, const Tensor& x0, const Shape& weight_shape,
                                        bool with_bias, const Conv2dParams& p) {
  checkSameDevice("conv2d backward", gy0, x0);
  const Tensor x = conv2dInput(x0);
  const bool nhwc = computeFormat(x) == MemoryFormat::channels_last;
  const Tensor gy = inFormat(gy0, computeFormat(x));
  Conv2dWeightGrads r;
  Tensor gw = Tensor::empty(weight_shape, x.dtype(),
                            nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous, x.device());
  if (gy.numel() == 0 || x.numel() == 0) {
    gw.zero();
    if (with_bias) r.bias = Tensor::zeros({weight_shape[0]}, x.dtype(), x.device());
    r.weight = gw.contiguous();
    return r;
  }
  if (gw.numel() == 0) {
    r.weight = gw.contiguous();
    if (with_bias) r.bias = sumPerChannel(gy);
    return r;
  }
  ConvDescs d("conv2d backward (weight)", x.shape(), weight_shape, p, x.dtype(), nhwc, x.device());
  const rt::Stream stream = rt::currentStream(x.device().index);
  cudnnHandle_t h = dnnHandle(stream);
  const Choice c = choose(Pass::filter, h, d);
  LOCKSTEP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), c.math), d.what);
  Tensor ws = scratch(c.workspace, x.device());
  const Scale one(x.dtype(), 1), zero(x.dtype(), 0);
  LOCKSTEP_CUDNN_CHECK(
      cudnnConvolutionBackwardFilter(h, one.ptr(), d.x.get(), x.devicePtr(), d.y.get(), gy.devicePtr(),
                                     d.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                     ws.devicePtr(), c.workspace, zero.ptr(), d.w.get(), gw.devicePtr()),
      d.what);
  r.weight = gw.isContiguous() ? gw : gw.contiguous();
  if (with_bias) r.bias = sumPerChannel(gy);
  return r;
}

}  // namespace lockstep::kernels::cuda
