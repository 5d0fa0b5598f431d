#include "lockstep/kernels/cuda/batch_norm.h"
#include "lockstep/kernels/cuda/channel.cuh"
#include "lockstep/kernels/cuda/handles.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

constexpr int kReduceBlock = 512;

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// One block per channel: the batch mean and biased variance (two passes over the channel).
template <typename T, typename S>
__global__ void statistics(const T* x, Geometry4d g, S* mean, S* var) {
  const int64_t c = blockIdx.x, count = g.n * g.h * g.w;
  double s = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) s += rt::castTo<double>(x[g.offsetIn(c, j)]);
  const double m = blockSum(s) / double(count);
  double q = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const double d = rt::castTo<double>(x[g.offsetIn(c, j)]) - m;
    q += d * d;
  }
  const double v = blockSum(q) / double(count);
  if (threadIdx.x == 0) {
    mean[c] = static_cast<S>(m);
    var[c] = static_cast<S>(v);
  }
}

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

// One block per channel: sums[c] = sum(g), sums[C + c] = sum(g * xhat); and the weight/bias
// gradients from them when asked.
template <typename T>
__global__ void gradientSums(const T* g, Geometry4d gg, const T* x, Geometry4d gx, const double* mean,
                             const double* var, double eps, double* sums, T* gweight, T* gbias) {
  const int64_t c = blockIdx.x, count = gx.n * gx.h * gx.w;
  const double m = mean[c], invstd = 1.0 / sqrt(var[c] + eps);
  double sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const double gv = rt::castTo<double>(g[gg.offsetIn(c, j)]);
    sg += gv;
    sgx += gv * (rt::castTo<double>(x[gx.offsetIn(c, j)]) - m) * invstd;
  }
  sg = blockSum(sg);
  sgx = blockSum(sgx);
  if (threadIdx.x == 0) {
    sums[c] = sg;
    sums[gx.c + c] = sgx;
    if (gweight) gweight[c] = rt::castTo<T>(sgx);
    if (gbias) gbias[c] = rt::castTo<T>(sg);
  }
}

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

template <typename T>
const T* in(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.devicePtr()) : nullptr;
}
template <typename T>
T* out(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.devicePtr()) : nullptr;
}
Geometry4d geometry(const Tensor& t) { return Geometry4d::of(t, t.isChannelsLast()); }

}  // namespace

BatchNormResult batchNorm2dForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const BatchNormParams& p) {
  checkSameDevice("batch_norm2d", x, weight, bias, running_mean);
  checkSameDevice("batch_norm2d", x, running_var);
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
      statistics<T, S><<<static_cast<unsigned>(C), kReduceBlock, 0, stream>>>(in<T>(x), geometry(x),
                                                                              out<S>(r.mean), out<S>(r.var));
    }
    if (x.numel() > 0) {
      normalise<T, S><<<rt::blocksFor(x.numel()), rt::kBlock, 0, stream>>>(
          in<T>(x), geometry(x), out<T>(r.y), geometry(r.y), in<S>(r.mean), in<S>(r.var), in<T>(w), in<T>(b),
          p.eps);
    }
    if (p.training && running_mean.defined()) {
      LOCKSTEP_ENFORCE(running_mean.dtype() == running_var.dtype(), ValueError, "batch_norm2d: running_mean ",
                       running_mean.describe(), " and running_var ", running_var.describe(),
                       " differ in dtype");
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
    gradientSums<T><<<static_cast<unsigned>(C), kReduceBlock, 0, stream>>>(
        in<T>(gy), geometry(gy), in<T>(x), geometry(x), in<double>(m), in<double>(v), p.eps,
        out<double>(sums), out<T>(r.weight), out<T>(r.bias));
    if (x.numel() > 0) {
      inputGradient<T><<<rt::blocksFor(x.numel()), rt::kBlock, 0, stream>>>(
          in<T>(gy), geometry(gy), in<T>(x), geometry(x), out<T>(r.x), geometry(r.x), in<double>(m),
          in<double>(v), in<T>(w), in<double>(sums), p.eps, p.training);
    }
  });
  return r;
}

}  // namespace lockstep::kernels::cuda
