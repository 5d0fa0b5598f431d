#include "lockstep/kernels/cuda/conv.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/kernels/cuda/channel.h"
#include "lockstep/kernels/cuda/dnn_util.h"
#include "lockstep/kernels/cuda/handles.h"
#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/tensor/cuda/allocator.h"
#include "lockstep/tensor/cuda/runtime.h"
#include "lockstep/util/env.h"

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

enum class Pass { forward, data, filter };

// The descriptors of one convolution problem.
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  DType dtype = DType::f32;
  std::string what;
  std::vector<int64_t> key;
  ConvDescs(const char* op, const Shape& xs, const Shape& ws, const Conv2dParams& p, DType t, bool nhwc,
            const Device& device);
};

ConvDescs::ConvDescs(const char* op, const Shape& xs, const Shape& ws, const Conv2dParams& p, DType t,
                     bool nhwc, const Device& device) {
  ConvDescs& d = *this;
  d.dtype = t;
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

// The algorithm, math type and workspace a pass runs with, chosen once per problem and options.
struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

// What GpuMathOptions ask of a problem's algorithm.
struct Wants {
  bool deterministic = true;
  bool fma_only = false;  // f32 with TF32 not allowed: CUDNN_FMA_MATH, as PyTorch sets it
  bool benchmark = false;
  // The math type the queries consider, as PyTorch sets it: tensor cores for bf16/f16 (cuDNN's
  // DEFAULT_MATH leaves a 16-bit problem to its FMA kernels, in f32 and NCHW: 30x slower on an
  // H200), DEFAULT_MATH for f32 with TF32 (tensor cores on Ampere and later), FMA for f32 without.
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

Wants wantsFor(DType t) {
  const GpuMathOptions o = gpuMathOptions();
  Wants w{o.cudnn_deterministic, t == DType::f32 && !o.cudnn_allow_tf32, o.cudnn_benchmark};
  if (w.fma_only) w.math = CUDNN_FMA_MATH;
  if (t == DType::bf16 || t == DType::f16) w.math = CUDNN_TENSOR_OP_MATH;
  return w;
}

// The device buffers of a pass (Find*Ex runs the algorithms on them; the output is overwritten by
// the call that follows).
struct Buffers {
  void *x = nullptr, *w = nullptr, *y = nullptr;
  // Nonzero: the data pass's output x holds a gradient being added to, and timing writes a scratch
  // buffer of this many bytes instead (allocated only when a problem is timed).
  size_t keep_x_bytes = 0;
};

// The three passes' query functions under one name each, for choose().
struct ForwardPass {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr Pass pass = Pass::forward;
  static cudnnStatus_t maxCount(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, ConvDescs& d, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), n, got,
                                                  perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, ConvDescs& d, cudnnConvolutionFwdAlgo_t algo,
                                 size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), algo,
                                                   bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, ConvDescs& d, const Buffers& b, int n, int* got, Perf* perf,
                            void* ws, size_t bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(h, d.x.get(), b.x, d.w.get(), b.w, d.conv.get(), d.y.get(),
                                                  b.y, n, got, perf, ws, bytes);
  }
};

struct DataPass {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr Pass pass = Pass::data;
  static cudnnStatus_t maxCount(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, ConvDescs& d, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), n,
                                                       got, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, ConvDescs& d, cudnnConvolutionBwdDataAlgo_t algo,
                                 size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                        algo, bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, ConvDescs& d, const Buffers& b, int n, int* got, Perf* perf,
                            void* ws, size_t bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.get(), b.w, d.y.get(), b.y, d.conv.get(),
                                                       d.x.get(), b.x, n, got, perf, ws, bytes);
  }
};

struct FilterPass {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr Pass pass = Pass::filter;
  static cudnnStatus_t maxCount(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, ConvDescs& d, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), n,
                                                         got, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, ConvDescs& d, cudnnConvolutionBwdFilterAlgo_t algo,
                                 size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                          algo, bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, ConvDescs& d, const Buffers& b, int n, int* got, Perf* perf,
                            void* ws, size_t bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.get(), b.x, d.y.get(), b.y, d.conv.get(),
                                                         d.w.get(), b.w, n, got, perf, ws, bytes);
  }
};

bool tensorOps(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// Whether cuDNN can run perf's algorithm with the math the options allow, determinism aside. Without
// TF32 an entry must not be a tensor-op one; it then runs with CUDNN_FMA_MATH whatever math type
// cuDNN reported for it (a DEFAULT_MATH entry of an f32 problem may mean TF32 on Ampere and later).
template <typename Perf>
bool runnable(const Perf& p, const Wants& w) {
  return p.status == CUDNN_STATUS_SUCCESS && !(w.fma_only && tensorOps(p.mathType));
}
template <typename Perf>
bool allowed(const Perf& p, const Wants& w) {
  return runnable(p, w) && (!w.deterministic || p.determinism == CUDNN_DETERMINISTIC);
}

// The first allowed entry of a ranked list (heuristics rank by expected speed, Find by measured
// time) as a choice; without TF32, with FMA math and the workspace cuDNN asks for it then (an entry
// cuDNN cannot run with FMA math is passed over). The descriptor's math type is the queried one.
template <typename P>
std::optional<Choice> firstAllowed(cudnnHandle_t h, ConvDescs& d, const std::vector<typename P::Perf>& perf,
                                   const Wants& w) {
  for (const auto& p : perf) {
    if (!allowed(p, w)) continue;
    if (!w.fma_only) return Choice{static_cast<int>(p.algo), p.mathType, p.memory};
    size_t bytes = 0;
    if (P::workspace(h, d, p.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    return Choice{static_cast<int>(p.algo), CUDNN_FMA_MATH, bytes};
  }
  return std::nullopt;
}

// The first allowed entry of cuDNN's heuristic ranking; an error saying which option rules the rest
// out when there is none.
template <typename P>
Choice heuristicChoice(cudnnHandle_t h, ConvDescs& d, const std::vector<typename P::Perf>& perf,
                       const Wants& w) {
  if (auto c = firstAllowed<P>(h, d, perf, w)) return *c;
  using Perf = typename P::Perf;
  const bool nondeterministic_only = std::any_of(perf.begin(), perf.end(), [&](const Perf& p) {
    return runnable(p, w) && p.determinism != CUDNN_DETERMINISTIC;
  });
  const bool any_success =
      std::any_of(perf.begin(), perf.end(), [](const Perf& p) { return p.status == CUDNN_STATUS_SUCCESS; });
  if (nondeterministic_only && w.deterministic) {
    throw NotSupportedError("cuDNN has no deterministic algorithm for " + d.what +
                            "; set backends.cudnn.deterministic: false in the config "
                            "(GpuMathOptions::cudnn_deterministic) to allow nondeterministic algorithms");
  }
  if (any_success && w.fma_only) {
    throw NotSupportedError(
        "cuDNN has no algorithm without TF32 for " + d.what +
        "; set backends.cudnn.allow_tf32: true in the config (GpuMathOptions::cudnn_allow_tf32) "
        "to allow TF32 tensor cores");
  }
  throw NotSupportedError("cuDNN has no algorithm for " + d.what);
}

// Most workspace a benchmark offers the algorithms it times (PyTorch offers what it can allocate).
constexpr size_t kBenchmarkWorkspaceCap = size_t{1} << 30;

// cudnnFind*AlgorithmEx: every algorithm run and timed on b's buffers (it synchronises the
// device), with a workspace as large as the largest allowed algorithm's heuristic estimate and the
// heuristic choice's (capped); nullopt when that workspace cannot be had or no timed algorithm is
// allowed: the heuristic choice stands then.
template <typename P>
std::optional<Choice> measure(cudnnHandle_t h, ConvDescs& d, const Buffers& b, const Device& device,
                              const std::vector<typename P::Perf>& heuristic, const Choice& chosen,
                              const Wants& w, int count) {
  size_t bytes = std::min(chosen.workspace, kBenchmarkWorkspaceCap);
  for (const auto& p : heuristic) {
    if (allowed(p, w)) bytes = std::max(bytes, std::min(p.memory, kBenchmarkWorkspaceCap));
  }
  Tensor ws, kept_x;
  Buffers timed = b;
  try {
    ws = scratch(bytes, device);
    if (P::pass == Pass::data && b.keep_x_bytes > 0) {
      kept_x = scratch(b.keep_x_bytes, device);
      timed.x = kept_x.devicePtr();
    }
  } catch (const ::lockstep::cuda::OutOfMemoryError&) {
    return std::nullopt;
  }
  std::vector<typename P::Perf> perf(static_cast<size_t>(count));
  int got = 0;
  LOCKSTEP_CUDNN_CHECK(P::find(h, d, timed, count, &got, perf.data(), ws.devicePtr(), bytes),
                       "timing algorithms of " + d.what);
  perf.resize(static_cast<size_t>(std::max(got, 0)));
  return firstAllowed<P>(h, d, perf, w);
}

// LOCKSTEP_CUDNN_VERBOSE=1 prints each convolution problem's choice once, as it is made (as
// ONEDNN_VERBOSE does for oneDNN's primitives), to stderr: which algorithm, math type and workspace
// each pass of each shape runs with, and whether heuristics or timing chose it.
bool verbose() {
  static const bool on = env::getBool("LOCKSTEP_CUDNN_VERBOSE", false);
  return on;
}

const char* algoName(Pass pass, int algo) {
  static const char* const kForward[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static const char* const kData[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                      "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const kFilter[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  auto pick = [&](const auto& names) -> const char* {
    const int n = static_cast<int>(std::size(names));
    return algo >= 0 && algo < n ? names[algo] : "?";
  };
  switch (pass) {
    case Pass::forward:
      return pick(kForward);
    case Pass::data:
      return pick(kData);
    case Pass::filter:
      return pick(kFilter);
  }
  return "?";
}

const char* mathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "DEFAULT";
    case CUDNN_TENSOR_OP_MATH:
      return "TENSOR_OP";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "TENSOR_OP_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH:
      return "FMA";
  }
  return "?";
}

void logChoice(const ConvDescs& d, Pass pass, const Choice& c, const Wants& w, bool measured) {
  static const char* const kPass[] = {"forward", "backward data", "backward weight"};
  std::fprintf(stderr, "lockstep cudnn: %s: %s algo %s (%d), math %s, workspace %zu bytes, %s%s\n",
               d.what.c_str(), kPass[static_cast<int>(pass)], algoName(pass, c.algo), c.algo,
               mathName(c.math), c.workspace, measured ? "fastest timed" : "heuristic choice",
               w.deterministic ? " among the deterministic algorithms" : "");
}

template <typename P>
Choice choose(cudnnHandle_t h, ConvDescs& d, const Buffers& b, const Device& device,
              const rt::Stream& stream) {
  static std::mutex mutex;
  static auto* chosen = new std::map<std::vector<int64_t>, Choice>();
  const Wants w = wantsFor(d.dtype);
  std::vector<int64_t> key = d.key;
  key.insert(key.end(), {static_cast<int64_t>(P::pass), w.deterministic, w.fma_only, w.benchmark});
  std::lock_guard<std::mutex> lock(mutex);
  auto it = chosen->find(key);
  if (it != chosen->end()) return it->second;
  LOCKSTEP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), w.math), d.what);
  int count = 0;
  LOCKSTEP_CUDNN_CHECK(P::maxCount(h, &count), d.what);
  count = std::max(count, 1);
  std::vector<typename P::Perf> perf(static_cast<size_t>(count));
  int got = 0;
  LOCKSTEP_CUDNN_CHECK(P::heuristics(h, d, count, &got, perf.data()), d.what);
  perf.resize(static_cast<size_t>(std::max(got, 0)));
  Choice c = heuristicChoice<P>(h, d, perf, w);
  bool measured = false;
  if (w.benchmark) {
    // Timing synchronises the device, which a stream being captured into a CUDA graph must not do:
    // the heuristic choice serves then, unremembered, and the next eager call times the algorithms.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LOCKSTEP_CUDA_CHECK(cudaStreamIsCapturing(stream.handle(), &capture));
    if (capture != cudaStreamCaptureStatusNone) return c;
    if (auto m = measure<P>(h, d, b, device, perf, c, w, count)) {
      c = *m;
      measured = true;
    }
  }
  if (verbose()) logChoice(d, P::pass, c, w, measured);
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
Tensor conv2dWeight(const Tensor& weight, const Tensor& x) {
  return filterOf(weight, computeFormat(x) == MemoryFormat::channels_last);
}

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
  const Choice c =
      choose<ForwardPass>(h, d, {x.devicePtr(), w.devicePtr(), y.devicePtr()}, x.device(), stream);
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

namespace {
// gx = dL/dx, or gx += dL/dx when accumulate (cuDNN's beta = 1: the sum rounded once). gx in the
// layout computeFormat(x) gives.
void backwardData(Tensor& gx, const Tensor& gy0, const Tensor& x, const Tensor& w0, const Conv2dParams& p,
                  bool accumulate) {
  const bool nhwc = computeFormat(x) == MemoryFormat::channels_last;
  const Tensor w = filterOf(w0, nhwc), gy = inFormat(gy0, computeFormat(x));
  if (gx.numel() == 0) return;
  if (gy.numel() == 0 || w.numel() == 0) {
    if (!accumulate) gx.zero();
    return;
  }
  ConvDescs d("conv2d backward (data)", x.shape(), w.shape(), p, x.dtype(), nhwc, x.device());
  const rt::Stream stream = rt::currentStream(x.device().index);
  cudnnHandle_t h = dnnHandle(stream);
  // Timing the algorithms (cudnn.benchmark) writes their results into the output buffer: not into a
  // gradient that is being accumulated.
  Buffers b{gx.devicePtr(), w.devicePtr(), gy.devicePtr()};
  if (accumulate) b.keep_x_bytes = static_cast<size_t>(gx.numel()) * dtypeSize(gx.dtype());
  const Choice c = choose<DataPass>(h, d, b, x.device(), stream);
  LOCKSTEP_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), c.math), d.what);
  Tensor ws = scratch(c.workspace, x.device());
  const Scale one(x.dtype(), 1), zero(x.dtype(), 0);
  LOCKSTEP_CUDNN_CHECK(cudnnConvolutionBackwardData(
                           h, one.ptr(), d.w.get(), w.devicePtr(), d.y.get(), gy.devicePtr(), d.conv.get(),
                           static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws.devicePtr(), c.workspace,
                           accumulate ? one.ptr() : zero.ptr(), d.x.get(), gx.devicePtr()),
                       d.what);
}
}  // namespace

Tensor conv2dBackwardData(const Tensor& gy0, const Tensor& x0, const Tensor& w0, const Conv2dParams& p) {
  checkSameDevice("conv2d backward", gy0, x0, w0);
  const Tensor x = conv2dInput(x0);
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), computeFormat(x), x.device());
  backwardData(gx, gy0, x, w0, p, false);
  return gx;
}

bool conv2dBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& x0, const Tensor& w,
                            const Conv2dParams& p) {
  checkSameDevice("conv2d backward", gy, x0, w);
  checkSameDevice("conv2d backward", gx, x0, w);
  const Tensor x = conv2dInput(x0);
  // cuDNN writes the gradient in the layout it computes in; a held gradient in another is added by
  // the caller.
  const Shape want = computeFormat(x) == MemoryFormat::channels_last ? channelsLastStrides(x.shape())
                                                                     : contiguousStrides(x.shape());
  // cuDNN's tensor-core kernels want 16-byte aligned tensors; a gradient held at an odd offset (a
  // slice of a concatenation's gradient) is added by the caller.
  if (gx.strides() != want || reinterpret_cast<uintptr_t>(gx.devicePtr()) % 16 != 0) return false;
  backwardData(gx, gy, x, w, p, true);
  return true;
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
  const Choice c =
      choose<FilterPass>(h, d, {x.devicePtr(), gw.devicePtr(), gy.devicePtr()}, x.device(), stream);
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
