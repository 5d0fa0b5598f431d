#include "lockstep/kernels/cuda/batch_norm.h"
#include "lockstep/kernels/cuda/channel.cuh"
#include "lockstep/kernels/cuda/handles.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The batch mean and biased variance from the sums of x and x^2 (in f64: E[x^2] - mean^2 loses
// nothing that matters at f32 precision unless |mean| / std is beyond ~1e4).
template <typename T>
struct MomentTerms {
  const T* x;
  Geometry4d g;
  __device__ void operator()(int64_t c, int64_t j, double& a, double& b) const {
    const double v = rt::castTo<double>(x[g.offsetIn(c, j)]);
    a += v;
    b += v * v;
  }
};

template <typename S>
struct StoreMoments {
  S* mean;
  S* var;
  double count;
  __device__ void operator()(int64_t c, double a, double b) const {
    const double m = a / count;
    mean[c] = static_cast<S>(m);
    var[c] = static_cast<S>(fmax(b / count - m * m, 0.0));
  }
};

template <typename T, typename S>
__global__ void normalise(const T* x, Geometry4d gx, T* y, Geometry4d gy, const S* mean, const S* var,
                          const T* weight, const T* bias, double eps) {
  using A = Acc<T>;
  const int64_t total = gy.numel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, h, w;
    gy.index(i, n, c, h, w);
    const A invstd = A(1) / sqrt(static_cast<A>(var[c]) + static_cast<A>(eps));
    A v = (rt::castTo<A>(x[gx.at(n, c, h, w)]) - static_cast<A>(mean[c])) * invstd;
    if (weight) v *= rt::castTo<A>(weight[c]);
    if (bias) v += rt::castTo<A>(bias[c]);
    y[gy.at(n, c, h, w)] = rt::castTo<T>(v);
  }
}

template <typename R, typename S>
__global__ void blendRunning(R* rm, int64_t sm, R* rv, int64_t sv, const S* mean, const S* var,
                             int64_t channels, double momentum, double unbias) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels;
       c += int64_t(gridDim.x) * blockDim.x) {
    const double m = rt::castTo<double>(rm[c * sm]), v = rt::castTo<double>(rv[c * sv]);
    rm[c * sm] = rt::castTo<R>((1 - momentum) * m + momentum * static_cast<double>(mean[c]));
    rv[c * sv] = rt::castTo<R>((1 - momentum) * v + momentum * unbias * static_cast<double>(var[c]));
  }
}

// sum(g) and sum(g * (x - mean)) per channel.
template <typename T>
struct GradientTerms {
  const T* g;
  Geometry4d gg;
  const T* x;
  Geometry4d gx;
  const double* mean;
  __device__ void operator()(int64_t c, int64_t j, double& a, double& b) const {
    const double gv = rt::castTo<double>(g[gg.offsetIn(c, j)]);
    a += gv;
    b += gv * (rt::castTo<double>(x[gx.offsetIn(c, j)]) - mean[c]);
  }
};

// sums[c] = sum(g), sums[C + c] = sum(g * xhat); and the weight/bias gradients when asked.
template <typename T>
struct StoreGradientSums {
  const double* var;
  double eps;
  int64_t channels;
  double* sums;
  T* gweight;
  T* gbias;
  __device__ void operator()(int64_t c, double a, double b) const {
    const double sgx = b / sqrt(var[c] + eps);
    sums[c] = a;
    sums[channels + c] = sgx;
    if (gweight) gweight[c] = rt::castTo<T>(sgx);
    if (gbias) gbias[c] = rt::castTo<T>(a);
  }
};

template <typename T>
__global__ void inputGradient(const T* g, Geometry4d gg, const T* x, Geometry4d gx, T* out, Geometry4d go,
                              const double* mean, const double* var, const T* weight, const double* sums,
                              double eps, bool training) {
  using A = Acc<T>;
  const int64_t total = go.numel();
  const A count = static_cast<A>(gx.n * gx.h * gx.w);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, h, w;
    go.index(i, n, c, h, w);
    const A invstd = static_cast<A>(1.0 / sqrt(var[c] + eps));
    const A scale = (weight ? rt::castTo<A>(weight[c]) : A(1)) * invstd;
    const A gv = rt::castTo<A>(g[gg.at(n, c, h, w)]);
    A r = gv * scale;
    if (training) {
      const A xhat = (rt::castTo<A>(x[gx.at(n, c, h, w)]) - static_cast<A>(mean[c])) * invstd;
      r = scale * (gv - static_cast<A>(sums[c]) / count - xhat * static_cast<A>(sums[gx.c + c]) / count);
    }
    out[go.at(n, c, h, w)] = rt::castTo<T>(r);
  }
}

template <typename Fn>
void floating(DType t, const char* op, Fn&& fn) {
  LOCKSTEP_ENFORCE(isFloating(t), NotSupportedError, op, " on a GPU takes floating tensors, got ",
                   dtypeName(t));
  rt::visitDeviceType(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __nv_bfloat16> ||
                  std::is_same_v<T, __half>) {
      fn(tag);
    }
  });
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

// Short names for the many operands below.
template <typename T>
const T* in(const Tensor& t) {
  return rt::devicePtrOrNull<const T>(t);
}
template <typename T>
T* out(const Tensor& t) {
  return rt::devicePtrOrNull<T>(t);
}
Geometry4d geometry(const Tensor& t) { return Geometry4d::of(t, t.isChannelsLast()); }

}  // namespace

BatchNormResult batchNorm2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const BatchNormParams& p) {
  checkSameDevice("batch_norm2d", x, weight, bias, running_mean);
  checkSameDevice("batch_norm2d", x, running_var);
  LOCKSTEP_ENFORCE(!running_mean.defined() || running_mean.dtype() == running_var.dtype(), ValueError,
                   "batch_norm2d: running_mean ", running_mean.describe(), " and running_var ",
                   running_var.describe(), " differ in dtype");
  const DType stat_type = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const int64_t C = x.size(1), count = x.size(0) * x.size(2) * x.size(3);
  BatchNormResult r;
  r.y = Tensor::empty(x.shape(), x.dtype(), formatOf(x), x.device());
  cudaStream_t stream = rt::currentStream(x.device().index).handle();
  if (p.training) {
    r.mean = Tensor::empty({C}, stat_type, MemoryFormat::contiguous, x.device());
    r.var = Tensor::empty({C}, stat_type, MemoryFormat::contiguous, x.device());
  } else {
    r.mean = running_mean.to(stat_type).contiguous();
    r.var = running_var.to(stat_type).contiguous();
    if (r.mean.sharesStorage(running_mean)) r.mean = r.mean.clone();  // copies, not the running tensors
    if (r.var.sharesStorage(running_var)) r.var = r.var.clone();
  }
  if (C == 0) return r;
  const Tensor w = weight.defined() ? weight.contiguous() : weight,
               b = bias.defined() ? bias.contiguous() : bias;
  floating(x.dtype(), "batch_norm2d", [&](auto tag) {
    using T = decltype(tag);
    using S = Acc<T>;
    if (p.training && count > 0) {
      channelSums(geometry(x), MomentTerms<T>{in<T>(x), geometry(x)},
                  StoreMoments<S>{out<S>(r.mean), out<S>(r.var), double(count)}, x.device());
    }
    if (x.numel() > 0) {
      normalise<T, S><<<rt::blocksFor(x.numel()), rt::kBlock, 0, stream>>>(
          in<T>(x), geometry(x), out<T>(r.y), geometry(r.y), in<S>(r.mean), in<S>(r.var), in<T>(w), in<T>(b),
          p.eps);
    }
    if (p.training && running_mean.defined()) {
      floating(running_mean.dtype(), "batch_norm2d (running statistics)", [&](auto rtag) {
        using R = decltype(rtag);
        blendRunning<R, S><<<rt::blocksFor(C), rt::kBlock, 0, stream>>>(
            out<R>(running_mean), running_mean.stride(0), out<R>(running_var), running_var.stride(0),
            in<S>(r.mean), in<S>(r.var), C, p.momentum, double(count) / double(count - 1));
      });
    }
  });
  return r;
}

BatchNormGrads batchNorm2dBackward(const Tensor& gy, const Tensor& x, const Tensor& weight, bool with_bias,
                                   const Tensor& mean, const Tensor& var, const BatchNormParams& p) {
  checkSameDevice("batch_norm2d backward", x, gy, weight, mean);
  checkSameDevice("batch_norm2d backward", x, var);
  const int64_t C = x.size(1);
  LOCKSTEP_ENFORCE(mean.defined() && var.defined() && mean.numel() == C && var.numel() == C, ValueError,
                   "batch_norm2d backward: mean ", mean.describe(), " and var ", var.describe(),
                   " must be the forward's [", C, "] statistics");
  BatchNormGrads r;
  r.x = Tensor::empty(x.shape(), x.dtype(), formatOf(x), x.device());
  if (weight.defined()) r.weight = Tensor::empty({C}, weight.dtype(), MemoryFormat::contiguous, x.device());
  if (with_bias) r.bias = Tensor::empty({C}, x.dtype(), MemoryFormat::contiguous, x.device());
  if (C == 0) return r;
  const Tensor m = mean.to(DType::f64).contiguous(), v = var.to(DType::f64).contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : weight;
  Tensor sums = Tensor::empty({2 * C}, DType::f64, MemoryFormat::contiguous, x.device());
  cudaStream_t stream = rt::currentStream(x.device().index).handle();
  floating(x.dtype(), "batch_norm2d backward", [&](auto tag) {
    using T = decltype(tag);
    channelSums(
        geometry(x), GradientTerms<T>{in<T>(gy), geometry(gy), in<T>(x), geometry(x), in<double>(m)},
        StoreGradientSums<T>{in<double>(v), p.eps, C, out<double>(sums), out<T>(r.weight), out<T>(r.bias)},
        x.device());
    if (x.numel() > 0) {
      inputGradient<T><<<rt::blocksFor(x.numel()), rt::kBlock, 0, stream>>>(
          in<T>(gy), geometry(gy), in<T>(x), geometry(x), out<T>(r.x), geometry(r.x), in<double>(m),
          in<double>(v), in<T>(w), in<double>(sums), p.eps, p.training);
    }
  });
  return r;
}

}  // namespace lockstep::kernels::cuda
