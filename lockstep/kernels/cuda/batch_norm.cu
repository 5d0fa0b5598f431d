#include "lockstep/kernels/cuda/batch_norm.h"
#include "lockstep/kernels/cuda/channel.cuh"
#include "lockstep/kernels/cuda/handles.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/tensor/cuda/runtime.h"

// Batch normalisation at memory speed: every kernel here walks a dense activation (NCHW or NHWC; a
// tensor in any other strides is made dense in its format first) in packs of 16 bytes where the
// layout allows it, with 32-bit index arithmetic where the tensor fits, so the statistics read x
// once, the normalisation reads x and writes y once, and the backward reads dL/dy and x twice (sums,
// then the input gradient) and writes dL/dx once. Per-channel sums run in f64 over a fixed split of
// the elements (per-thread sums, then a fixed-order reduction over the block, then over the splits),
// so a run repeats bitwise.

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

// The dtype of the statistics, the affine parameters as the kernels read them, and the arithmetic:
// f32 for f32/bf16/f16 activations, f64 for f64.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// A dense [N, C, H, W] activation: element i belongs to channel (i / inner) % channels, with inner 1
// in NHWC (channels fastest) and H * W in NCHW. I is the index type (32 bits when the tensor fits).
template <typename I>
struct Dense {
  I numel, channels, inner, count;  // count: elements per channel
  bool nhwc;
};

// Elements per 16-byte pack.
template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

template <typename T, int V>
struct alignas(V * sizeof(T)) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}
template <typename T, int V>
__device__ __forceinline__ void store(T* p, const Pack<T, V>& v) {
  *reinterpret_cast<Pack<T, V>*>(p) = v;
}

// Blocks the statistics kernels aim for in all (a few waves on a GPU of ~130 SMs).
constexpr int64_t kTargetBlocks = 512;
constexpr int kThreads = 256;

// --- per-channel sums of two terms -------------------------------------------------------------------
//
// Term: `Loaded load(I offset) const` reads the V elements at offset (the packs the terms need), and
// `void add(const Loaded&, I channel, int dc, double (&a)[V], double (&b)[V]) const` adds their terms
// (channels channel + v * dc) to a[v], b[v]. The walks load kUnroll positions before adding any, so
// that each thread has several loads in flight (one at a time reached ~1.6 TB/s on an H200), and add
// them in position order, so the sums stay in a fixed order.
constexpr int kUnroll = 4;

// NHWC: the tensor as a [count, C] matrix; blockDim (tx, ty), a thread owns V consecutive channels
// (a column group) and walks rows; the block's rows are summed in fixed order, then written per split.
template <int V, typename I, typename Term>
__global__ void rowPartials(Dense<I> d, Term term, double* partial) {
  const I groups = d.channels / V, g = blockIdx.x * I(blockDim.x) + threadIdx.x;
  const I split = blockIdx.y, splits = gridDim.y;
  double a[V] = {}, b[V] = {};
  if (g < groups) {
    const I step = I(blockDim.y) * splits;
    I r = split * I(blockDim.y) + threadIdx.y;
    for (; r + (kUnroll - 1) * step < d.count; r += kUnroll * step) {
      typename Term::Loaded l[kUnroll];
      for (int u = 0; u < kUnroll; ++u) l[u] = term.load((r + u * step) * d.channels + g * V);
      for (int u = 0; u < kUnroll; ++u) term.add(l[u], g * V, 1, a, b);
    }
    for (; r < d.count; r += step) term.add(term.load(r * d.channels + g * V), g * V, 1, a, b);
  }
  __shared__ double sa[kThreads * V], sb[kThreads * V];
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  for (int v = 0; v < V; ++v) {
    sa[t * V + v] = a[v];
    sb[t * V + v] = b[v];
  }
  __syncthreads();
  if (threadIdx.y == 0 && g < groups) {
    for (unsigned y = 1; y < blockDim.y; ++y) {
      const int u = y * blockDim.x + threadIdx.x;
      for (int v = 0; v < V; ++v) {
        a[v] += sa[u * V + v];
        b[v] += sb[u * V + v];
      }
    }
    for (int v = 0; v < V; ++v) {
      partial[(I(2) * split) * d.channels + g * V + v] = a[v];
      partial[(I(2) * split + 1) * d.channels + g * V + v] = b[v];
    }
  }
}

// NCHW: grid (C, splits); the block walks its channel's packs (a pack stays within one H*W plane).
template <int V, typename I, typename Term>
__global__ void planePartials(Dense<I> d, Term term, double* partial) {
  const I c = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const I per_plane = d.inner / V, packs = d.count / V;
  double a[V] = {}, b[V] = {};
  auto offset = [&](I j) {
    const I n = j / per_plane, r = j - n * per_plane;
    return (n * d.channels + c) * d.inner + r * V;
  };
  const I step = I(blockDim.x) * splits;
  I j = split * I(blockDim.x) + threadIdx.x;
  for (; j + (kUnroll - 1) * step < packs; j += kUnroll * step) {
    typename Term::Loaded l[kUnroll];
    for (int u = 0; u < kUnroll; ++u) l[u] = term.load(offset(j + u * step));
    for (int u = 0; u < kUnroll; ++u) term.add(l[u], c, 0, a, b);
  }
  for (; j < packs; j += step) term.add(term.load(offset(j)), c, 0, a, b);
  double ta = 0, tb = 0;
  for (int v = 0; v < V; ++v) {
    ta += a[v];
    tb += b[v];
  }
  ta = blockSum(ta);
  tb = blockSum(tb);
  if (threadIdx.x == 0) {
    partial[(I(2) * split) * d.channels + c] = ta;
    partial[(I(2) * split + 1) * d.channels + c] = tb;
  }
}

// A warp per channel sums the splits' partials in fixed order, then Finish gets the totals:
// `void operator()(int64_t c, double a, double b) const`.
template <typename Finish>
__global__ void finishSums(const double* partial, int64_t splits, int64_t channels, Finish finish) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= channels) return;
  double a = 0, b = 0;
  int64_t s = lane;
  for (; s + 32 * (kUnroll - 1) < splits; s += 32 * kUnroll) {
    double la[kUnroll], lb[kUnroll];
    for (int u = 0; u < kUnroll; ++u) {
      la[u] = partial[(2 * (s + 32 * u)) * channels + c];
      lb[u] = partial[(2 * (s + 32 * u) + 1) * channels + c];
    }
    for (int u = 0; u < kUnroll; ++u) {
      a += la[u];
      b += lb[u];
    }
  }
  for (; s < splits; s += 32) {
    a += partial[(2 * s) * channels + c];
    b += partial[(2 * s + 1) * channels + c];
  }
  for (int o = 16; o > 0; o /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  if (lane == 0) finish(c, a, b);
}

// The launch of the sums: partials (rowPartials or planePartials), then finishSums.
template <int V, typename I, typename Term, typename Finish>
void channelSums(const Dense<I>& d, const Term& term, const Finish& finish, const Device& device,
                 cudaStream_t stream) {
  const int64_t C = static_cast<int64_t>(d.channels), count = static_cast<int64_t>(d.count);
  dim3 grid, block;
  int64_t splits = 1;
  if (d.nhwc) {
    const int64_t groups = C / V;
    int64_t tx = 1;
    while (tx < groups && tx < 32) tx *= 2;
    const int64_t ty = kThreads / tx, units = (groups + tx - 1) / tx;
    splits = std::clamp<int64_t>(kTargetBlocks / units, 1, std::max<int64_t>(1, count / (ty * 8)));
    grid = dim3(static_cast<unsigned>(units), static_cast<unsigned>(splits));
    block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  } else {
    splits = std::clamp<int64_t>(kTargetBlocks / C, 1, std::max<int64_t>(1, count / V / (kThreads * 8)));
    splits = std::min<int64_t>(splits, 65535);
    grid = dim3(static_cast<unsigned>(C), static_cast<unsigned>(splits));
    block = dim3(kThreads);
  }
  Tensor partial = Tensor::empty({splits * 2 * C}, DType::f64, MemoryFormat::contiguous, device);
  double* p = static_cast<double*>(partial.devicePtr());
  if (d.nhwc) {
    rowPartials<V, I, Term><<<grid, block, 0, stream>>>(d, term, p);
  } else {
    planePartials<V, I, Term><<<grid, block, 0, stream>>>(d, term, p);
  }
  const unsigned warps_per_block = kThreads / 32;
  finishSums<Finish>
      <<<static_cast<unsigned>((C + warps_per_block - 1) / warps_per_block), kThreads, 0, stream>>>(
          p, splits, C, finish);
}

// --- forward ------------------------------------------------------------------------------------------

template <typename T, int V, typename I>
struct MomentTerm {
  using Loaded = Pack<T, V>;
  const T* x;
  __device__ Loaded load(I off) const { return ::lockstep::kernels::cuda::load<T, V>(x + off); }
  __device__ void add(const Loaded& p, I, int, double (&a)[V], double (&b)[V]) const {
    for (int v = 0; v < V; ++v) {
      const double xv = rt::castTo<double>(p.v[v]);
      a[v] += xv;
      b[v] += xv * xv;
    }
  }
};

// The batch mean and biased variance (E[x^2] - mean^2 in f64 loses nothing that matters at f32
// precision unless |mean| / std is beyond ~1e4), the running statistics blended in place, and the
// normalisation's coefficients per channel: coef = (mean, weight / sqrt(var + eps), bias).
template <typename S, typename R>
struct StoreMoments {
  S* mean;
  S* var;
  R* running_mean;
  int64_t rm_stride;
  R* running_var;
  int64_t rv_stride;
  double count, momentum, eps;
  const S* weight;
  const S* bias;
  int64_t channels;
  S* coef;
  __device__ void operator()(int64_t c, double a, double b) const {
    // A variance below 0 by rounding is 0; a NaN one (a NaN or inf in the channel) stays NaN, as
    // the CPU's and torch's (fmax would make it 0).
    const double d = b / count - (a / count) * (a / count);
    const S m = static_cast<S>(a / count), v = static_cast<S>(d < 0.0 ? 0.0 : d);
    mean[c] = m;
    var[c] = v;
    coef[c] = m;
    coef[channels + c] = (weight ? weight[c] : S(1)) * (S(1) / sqrt(v + static_cast<S>(eps)));
    coef[2 * channels + c] = bias ? bias[c] : S(0);
    if (running_mean) {
      R& rm = running_mean[c * rm_stride];
      R& rv = running_var[c * rv_stride];
      rm = rt::castTo<R>((1 - momentum) * rt::castTo<double>(rm) + momentum * static_cast<double>(m));
      rv = rt::castTo<R>((1 - momentum) * rt::castTo<double>(rv) +
                         momentum * (count / (count - 1)) * static_cast<double>(v));
    }
  }
};

// The coefficients from given statistics (eval mode).
template <typename S>
__global__ void evalCoefficients(const S* mean, const S* var, const S* weight, const S* bias, S eps,
                                 int64_t channels, S* coef) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels;
       c += int64_t(gridDim.x) * blockDim.x) {
    coef[c] = mean[c];
    coef[channels + c] = (weight ? weight[c] : S(1)) * (S(1) / sqrt(var[c] + eps));
    coef[2 * channels + c] = bias ? bias[c] : S(0);
  }
}

// V per-channel values for the pack whose first element is in channel c0: V consecutive channels'
// (one load from a 16-byte aligned array) in NHWC, one channel's repeated in NCHW.
template <typename A, int V, typename I>
__device__ __forceinline__ Pack<A, V> channelPack(const A* a, I c0, bool nhwc) {
  if (nhwc) return load<A, V>(a + c0);
  Pack<A, V> p;
  const A v = a[c0];
  for (int i = 0; i < V; ++i) p.v[i] = v;
  return p;
}

// y = (x - mean) * scale + shift with coef = (mean, scale, shift), plus the residual when given, then
// the relu when asked; a pack per thread.
template <typename T, int V, typename I>
__global__ void normalise(Dense<I> d, const T* __restrict__ x, const T* __restrict__ residual, bool relu,
                          T* __restrict__ y, const Acc<T>* coef) {
  using A = Acc<T>;
  const I packs = d.numel / V, C = d.channels;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < packs; i += I(gridDim.x) * blockDim.x) {
    const I off = i * V, c0 = (off / d.inner) % C;
    const Pack<T, V> p = load<T, V>(x + off);
    const Pack<A, V> mean = channelPack<A, V>(coef, c0, d.nhwc),
                     scale = channelPack<A, V>(coef + C, c0, d.nhwc),
                     shift = channelPack<A, V>(coef + 2 * C, c0, d.nhwc);
    Pack<A, V> r;
    for (int v = 0; v < V; ++v) r.v[v] = (rt::castTo<A>(p.v[v]) - mean.v[v]) * scale.v[v] + shift.v[v];
    if (residual) {
      const Pack<T, V> res = load<T, V>(residual + off);
      for (int v = 0; v < V; ++v) r.v[v] += rt::castTo<A>(res.v[v]);
    }
    Pack<T, V> q;
    for (int v = 0; v < V; ++v) q.v[v] = rt::castTo<T>(relu ? (r.v[v] < A(0) ? A(0) : r.v[v]) : r.v[v]);
    store<T, V>(y + off, q);
  }
}

// --- backward -----------------------------------------------------------------------------------------

// dL/dy where the fused relu let it through: y > 0 or NaN (all of it without the relu, y null).
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> masked(Pack<T, V> g, const Pack<T, V>& y, bool relu) {
  if (relu) {
    for (int v = 0; v < V; ++v) {
      if (rt::castTo<float>(y.v[v]) <= 0.0f) g.v[v] = rt::castTo<T>(0.0f);  // a NaN y passes g
    }
  }
  return g;
}

// sum(g) and sum(g * (x - mean)) per channel, g masked by the fused relu's output when given.
template <typename T, int V, typename I>
struct GradientTerm {
  struct Loaded {
    Pack<T, V> g, y, x;
  };
  const T* g;
  const T* y;
  const T* x;
  const Acc<T>* mean;
  __device__ Loaded load(I off) const {
    Loaded l;
    l.g = ::lockstep::kernels::cuda::load<T, V>(g + off);
    if (y) l.y = ::lockstep::kernels::cuda::load<T, V>(y + off);
    l.x = ::lockstep::kernels::cuda::load<T, V>(x + off);
    return l;
  }
  __device__ void add(const Loaded& l, I c, int dc, double (&a)[V], double (&b)[V]) const {
    const Pack<T, V> gp = masked<T, V>(l.g, l.y, y != nullptr);
    for (int v = 0; v < V; ++v) {
      const double gv = rt::castTo<double>(gp.v[v]);
      a[v] += gv;
      b[v] += gv * (rt::castTo<double>(l.x.v[v]) - static_cast<double>(mean[c + v * dc]));
    }
  }
};

// The weight and bias gradients, and the input gradient's coefficients per channel:
// dL/dx = k[c] * g + k[C + c] * (x - k[3C + c]) + k[2C + c]; in training k = (scale, -scale * invstd
// * sum(g * xhat) / count, -scale * sum(g) / count, mean) with scale = weight * invstd, in eval
// (scale, 0, 0, mean).
template <typename S, typename P>
struct StoreGradientSums {
  const S* mean;
  const S* var;
  const S* weight;
  double eps, count;
  int64_t channels;
  bool training;
  S* k;
  P* gweight;
  P* gbias;
  __device__ void operator()(int64_t c, double a, double b) const {
    const double invstd = 1.0 / sqrt(static_cast<double>(var[c]) + eps), sgx = b * invstd;
    const double scale = (weight ? static_cast<double>(weight[c]) : 1.0) * invstd;
    k[c] = static_cast<S>(scale);
    k[channels + c] = static_cast<S>(training ? -scale * invstd * sgx / count : 0.0);
    k[2 * channels + c] = static_cast<S>(training ? -scale * a / count : 0.0);
    k[3 * channels + c] = mean[c];
    if (gweight) gweight[c] = rt::castTo<P>(sgx);
    if (gbias) gbias[c] = rt::castTo<P>(a);
  }
};

template <typename T, int V, typename I>
__global__ void inputGradient(Dense<I> d, const T* __restrict__ g, const T* __restrict__ y,
                              const T* __restrict__ x, T* __restrict__ out, T* __restrict__ gresidual,
                              const Acc<T>* k) {
  using A = Acc<T>;
  const I packs = d.numel / V, C = d.channels;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < packs; i += I(gridDim.x) * blockDim.x) {
    const I off = i * V, c0 = (off / d.inner) % C;
    Pack<T, V> yp;
    if (y) yp = load<T, V>(y + off);
    const Pack<T, V> gp = masked<T, V>(load<T, V>(g + off), yp, y != nullptr), xp = load<T, V>(x + off);
    if (gresidual) store<T, V>(gresidual + off, gp);
    const Pack<A, V> k1 = channelPack<A, V>(k, c0, d.nhwc), k2 = channelPack<A, V>(k + C, c0, d.nhwc),
                     k3 = channelPack<A, V>(k + 2 * C, c0, d.nhwc),
                     mean = channelPack<A, V>(k + 3 * C, c0, d.nhwc);
    Pack<T, V> q;
    for (int v = 0; v < V; ++v) {
      q.v[v] = rt::castTo<T>(k1.v[v] * rt::castTo<A>(gp.v[v]) +
                             k2.v[v] * (rt::castTo<A>(xp.v[v]) - mean.v[v]) + k3.v[v]);
    }
    store<T, V>(out + off, q);
  }
}

// --- dispatch -----------------------------------------------------------------------------------------

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
  return rt::devicePtrOrNull<const T>(t);
}
template <typename T>
T* out(const Tensor& t) {
  return rt::devicePtrOrNull<T>(t);
}

bool aligned(const Tensor& t) { return !t.defined() || reinterpret_cast<uintptr_t>(t.devicePtr()) % 16 == 0; }

// Calls fn(Dense<I>, std::integral_constant<int, V>{}) with the pack width the layout and the
// operands' alignment allow (16 bytes, else one element) and 32-bit indices where they suffice.
// Every operand must be dense in x's format.
template <typename T, typename Fn>
void withLayout(const Tensor& x, std::initializer_list<const Tensor*> operands, Fn&& fn) {
  const bool nhwc = formatOf(x) == MemoryFormat::channels_last;
  const int64_t C = x.size(1), inner = nhwc ? 1 : x.size(2) * x.size(3);
  constexpr int V = kPack<T>;
  bool packed = (nhwc ? C : inner) % V == 0;
  for (const Tensor* t : operands) packed = packed && aligned(*t);
  auto run = [&](auto index) {
    using I = decltype(index);
    const Dense<I> d{static_cast<I>(x.numel()), static_cast<I>(C), static_cast<I>(inner),
                     static_cast<I>(C == 0 ? 0 : x.numel() / C), nhwc};
    if (packed) {
      fn(d, std::integral_constant<int, V>{});
    } else {
      fn(d, std::integral_constant<int, 1>{});
    }
  };
  if (x.numel() < (int64_t{1} << 31)) {
    run(uint32_t{});
  } else {
    run(int64_t{});
  }
}

// An optional [C] operand as the kernels read it: contiguous, in the statistics' dtype.
Tensor asStat(const Tensor& t, DType stat) { return t.defined() ? t.to(stat).contiguous() : t; }

}  // namespace

BatchNormResult batchNorm2dForward(const Tensor& x0, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const Tensor& residual0, const BatchNormParams& p) {
  checkSameDevice("batch_norm2d", x0, weight, bias, running_mean);
  checkSameDevice("batch_norm2d", x0, running_var);
  LOCKSTEP_ENFORCE(!running_mean.defined() || running_mean.dtype() == running_var.dtype(), ValueError,
                   "batch_norm2d: running_mean ", running_mean.describe(), " and running_var ",
                   running_var.describe(), " differ in dtype");
  const Tensor x = inFormat(x0, formatOf(x0));
  const Tensor residual = residual0.defined() ? inFormat(residual0, formatOf(x)) : residual0;
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
  const Tensor w = asStat(weight, stat_type), b = asStat(bias, stat_type);
  // (mean, scale, shift) per channel, in a buffer of its own so the kernels' pack loads are aligned.
  Tensor coef = Tensor::empty({3 * C}, stat_type, MemoryFormat::contiguous, x.device());
  floating(x.dtype(), "batch_norm2d", [&](auto tag) {
    using T = decltype(tag);
    using S = Acc<T>;
    withLayout<T>(x, {&x, &r.y, &residual}, [&](auto d, auto vec) {
      constexpr int V = decltype(vec)::value;
      using I = decltype(d.numel);
      if (p.training) {
        auto moments = [&](auto rtag) {
          using R = decltype(rtag);
          const bool running = running_mean.defined();
          const StoreMoments<S, R> finish{out<S>(r.mean),
                                          out<S>(r.var),
                                          running ? out<R>(running_mean) : nullptr,
                                          running ? running_mean.stride(0) : 0,
                                          running ? out<R>(running_var) : nullptr,
                                          running ? running_var.stride(0) : 0,
                                          double(count),
                                          p.momentum,
                                          p.eps,
                                          in<S>(w),
                                          in<S>(b),
                                          C,
                                          out<S>(coef)};
          channelSums<V, I>(d, MomentTerm<T, V, I>{in<T>(x)}, finish, x.device(), stream);
        };
        if (running_mean.defined()) {
          floating(running_mean.dtype(), "batch_norm2d (running statistics)", moments);
        } else {
          moments(S{});
        }
      } else {
        evalCoefficients<S><<<rt::blocksFor(C), rt::kBlock, 0, stream>>>(
            in<S>(r.mean), in<S>(r.var), in<S>(w), in<S>(b), static_cast<S>(p.eps), C, out<S>(coef));
      }
      if (x.numel() > 0) {
        normalise<T, V, I><<<rt::blocksFor(x.numel() / V), rt::kBlock, 0, stream>>>(
            d, in<T>(x), in<T>(residual), p.relu, out<T>(r.y), in<S>(coef));
      }
    });
  });
  return r;
}

BatchNormGrads batchNorm2dBackward(const Tensor& gy0, const Tensor& x0, const Tensor& weight, bool with_bias,
                                   const Tensor& mean, const Tensor& var, const Tensor& y0,
                                   bool with_residual, const BatchNormParams& p) {
  checkSameDevice("batch_norm2d backward", x0, gy0, weight, mean);
  checkSameDevice("batch_norm2d backward", x0, var);
  const int64_t C = x0.size(1);
  LOCKSTEP_ENFORCE(mean.defined() && var.defined() && mean.numel() == C && var.numel() == C, ValueError,
                   "batch_norm2d backward: mean ", mean.describe(), " and var ", var.describe(),
                   " must be the forward's [", C, "] statistics");
  const MemoryFormat fmt = formatOf(x0);
  const Tensor x = inFormat(x0, fmt), gy = inFormat(gy0, fmt);
  const Tensor y = p.relu ? inFormat(y0, fmt) : Tensor();
  const DType stat_type = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  // The parameters' gradients come in the weight's dtype (f32 beside a bf16/f16 x under autocast).
  const DType param_type = weight.defined() ? weight.dtype() : x.dtype();
  BatchNormGrads r;
  r.x = Tensor::empty(x.shape(), x.dtype(), fmt, x.device());
  if (weight.defined()) r.weight = Tensor::empty({C}, param_type, MemoryFormat::contiguous, x.device());
  if (with_bias) r.bias = Tensor::empty({C}, param_type, MemoryFormat::contiguous, x.device());
  if (with_residual) r.residual = Tensor::empty(x.shape(), x.dtype(), fmt, x.device());
  if (C == 0) return r;
  const Tensor m = asStat(mean, stat_type), v = asStat(var, stat_type), w = asStat(weight, stat_type);
  const int64_t count = x.size(0) * x.size(2) * x.size(3);
  cudaStream_t stream = rt::currentStream(x.device().index).handle();
  floating(x.dtype(), "batch_norm2d backward", [&](auto tag) {
    using T = decltype(tag);
    using S = Acc<T>;
    Tensor k = Tensor::empty({4 * C}, stat_type, MemoryFormat::contiguous, x.device());
    withLayout<T>(x, {&x, &gy, &y, &r.x, &r.residual}, [&](auto d, auto vec) {
      constexpr int V = decltype(vec)::value;
      using I = decltype(d.numel);
      floating(param_type, "batch_norm2d backward (parameters)", [&](auto ptag) {
        using P = decltype(ptag);
        const StoreGradientSums<S, P> finish{
            in<S>(m),   in<S>(v),  in<S>(w),         p.eps,         double(count), C,
            p.training, out<S>(k), out<P>(r.weight), out<P>(r.bias)};
        channelSums<V, I>(d, GradientTerm<T, V, I>{in<T>(gy), in<T>(y), in<T>(x), in<S>(m)}, finish,
                          x.device(), stream);
      });
      if (x.numel() > 0) {
        inputGradient<T, V, I><<<rt::blocksFor(x.numel() / V), rt::kBlock, 0, stream>>>(
            d, in<T>(gy), in<T>(y), in<T>(x), out<T>(r.x), out<T>(r.residual), in<S>(k));
      }
    });
  });
  return r;
}

}  // namespace lockstep::kernels::cuda
