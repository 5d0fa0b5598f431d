// Embedding, RMS normalisation, SwiGLU and rotary embedding on a GPU (see transformer.h).
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "lockstep/kernels/cuda/block_reduce.cuh"
#include "lockstep/kernels/cuda/column_sums.cuh"
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/reduce.h"
#include "lockstep/kernels/cuda/transformer.h"

namespace lockstep::kernels::cuda {

namespace {

int64_t lastDim(const Tensor& x) { return x.dim() == 0 ? 1 : x.size(x.dim() - 1); }

// --- embedding ---

// y[i, c] = w[ix[i], c]; an index outside [0, v) gives a NaN row and lowers *bad to its position.
template <typename T>
__global__ void gatherRows(T* __restrict__ y, const T* __restrict__ w, const int64_t* __restrict__ ix,
                           int64_t n, int64_t d, int64_t v, unsigned long long* bad) {
  using A = ComputeT<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * d;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / d, c = e % d, row = ix[i];
    if (row < 0 || row >= v) {
      y[e] = castTo<T>(std::numeric_limits<A>::quiet_NaN());
      if (c == 0) atomicMin(bad, static_cast<unsigned long long>(i));
    } else {
      y[e] = w[row * d + c];
    }
  }
}

__global__ void iota(int64_t* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = i;
}

// After sorting (index, position) pairs by index: the first element of each run of one index sums
// that index's gradient rows in position order into its row of gw.
template <typename T>
__global__ void sumRuns(T* __restrict__ gw, const T* __restrict__ g, const int64_t* __restrict__ keys,
                        const int64_t* __restrict__ pos, int64_t n, int64_t d, int64_t rows,
                        int64_t padding) {
  using A = ComputeT<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * d;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = e / d, c = e % d, key = keys[k];
    if ((k > 0 && keys[k - 1] == key) || key < 0 || key >= rows || key == padding) continue;
    A acc = A(0);
    for (int64_t j = k; j < n && keys[j] == key; ++j) acc += castTo<A>(g[pos[j] * d + c]);
    gw[key * d + c] = castTo<T>(acc);
  }
}

// --- RMS normalisation ---

template <int G, typename T, typename O>
__global__ void rmsForwardRows(O* __restrict__ y, ComputeT<T>* __restrict__ rstd, const T* __restrict__ x,
                               const T* __restrict__ w, int64_t m, int64_t d, ComputeT<T> eps) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  __shared__ A shm[32];
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const T* row = x + r * d;
    A ss = A(0);
    for (int64_t j = R::lane(); j < d; j += R::width()) {
      const A v = castTo<A>(row[j]);
      ss += v * v;
    }
    const A s = A(1) / dSqrt(R::sum(ss, shm) / static_cast<A>(d) + eps);
    for (int64_t j = R::lane(); j < d; j += R::width())
      y[r * d + j] = castTo<O>(castTo<A>(row[j]) * s * (w ? castTo<A>(w[j]) : A(1)));
    if (R::lane() == 0) rstd[r] = s;
  }
}

// gx = s (g w - x s^2 mean(g w x)), or gx += that rounded to T when accumulate. g of type GT (x's,
// or bf16/f16 for an f32 x).
template <int G, typename T, typename GT>
__global__ void rmsBackwardRows(T* __restrict__ gx, const GT* __restrict__ gy, const T* __restrict__ x,
                                const ComputeT<T>* __restrict__ rstd, const T* __restrict__ w, int64_t m,
                                int64_t d, bool accumulate) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  __shared__ A shm[32];
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const T* xr = x + r * d;
    const GT* gr = gy + r * d;
    const A s = rstd[r];
    A dot = A(0);
    for (int64_t j = R::lane(); j < d; j += R::width())
      dot += castTo<A>(gr[j]) * (w ? castTo<A>(w[j]) : A(1)) * castTo<A>(xr[j]);
    const A c = s * s * R::sum(dot, shm) / static_cast<A>(d);
    for (int64_t j = R::lane(); j < d; j += R::width()) {
      const A g = castTo<A>(gr[j]), xv = castTo<A>(xr[j]);
      const T v = castTo<T>(s * (g * (w ? castTo<A>(w[j]) : A(1)) - xv * c));
      gx[r * d + j] = accumulate ? castTo<T>(dAddRn(castTo<A>(gx[r * d + j]), castTo<A>(v))) : v;
    }
  }
}

// The weight gradient's term at (r, j): g x s (column sums with column_sums.cuh).
template <typename T, typename GT>
struct RmsWeightTerm {
  using A = ComputeT<T>;
  const GT* gy;
  const T* x;
  const A* rstd;
  int64_t d;
  __device__ Terms<A, 1> operator()(int64_t r, int64_t j) const {
    return {{castTo<A>(gy[r * d + j]) * castTo<A>(x[r * d + j]) * rstd[r]}};
  }
};

// --- SwiGLU ---

template <typename C>
__device__ __forceinline__ C sigmoidOf(C v) {
  return C(1) / (C(1) + dExp(-v));
}
template <typename C>
struct SwigluFn {
  __device__ C operator()(C g, C u) const { return g * sigmoidOf(g) * u; }
};
template <typename C>
struct SwigluGateGradFn {
  __device__ C operator()(C dy, C g, C u) const {
    const C s = sigmoidOf(g);
    return dy * u * s * (C(1) + g * (C(1) - s));
  }
};
template <typename C>
struct SwigluUpGradFn {
  __device__ C operator()(C dy, C g, C /*u*/) const { return dy * g * sigmoidOf(g); }
};

// --- rotary embedding ---

// x [rows, 2h] with rows = (...) * t; position r % t rotates pairs (i, i + h) by cos/sin [t, h].
template <typename T>
__global__ void rotateRows(T* __restrict__ y, const T* __restrict__ x, const ComputeT<T>* __restrict__ cs,
                           const ComputeT<T>* __restrict__ sn, int64_t rows, int64_t t, int64_t h,
                           ComputeT<T> sign) {
  using A = ComputeT<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < rows * h;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / h, i = e % h, at = (r % t) * h + i;
    const A x1 = castTo<A>(x[r * 2 * h + i]), x2 = castTo<A>(x[r * 2 * h + h + i]);
    const A c = cs[at], s = sign * sn[at];
    y[r * 2 * h + i] = castTo<T>(x1 * c - x2 * s);
    y[r * 2 * h + h + i] = castTo<T>(x2 * c + x1 * s);
  }
}

}  // namespace

Tensor embeddingForward(const Tensor& weight, const Tensor& indices) {
  checkSameDevice("embedding", weight, indices);
  const Tensor w = weight.contiguous(), ix = indices.contiguous();
  const int64_t n = ix.numel(), d = w.size(1), v = w.size(0);
  Shape shape = indices.shape();
  shape.push_back(d);
  Tensor y = emptyOn(shape, w.dtype(), w);
  if (n == 0 || d == 0) return y;
  Tensor bad = Tensor::full({1}, static_cast<double>(n), DType::i64, w.device());
  cudaStream_t stream = streamOf(w);
  visitFloating("embedding", w.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gatherRows<T><<<blocksFor(n * d), kBlock, 0, stream>>>(
        static_cast<T*>(y.devicePtr()), static_cast<const T*>(w.devicePtr()),
        static_cast<const int64_t*>(ix.devicePtr()), n, d, v,
        static_cast<unsigned long long*>(bad.devicePtr()));
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LOCKSTEP_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture == cudaStreamCaptureStatusNone) {
    const int64_t first = bad.to(Device::cpu()).item<int64_t>();
    LOCKSTEP_ENFORCE(first >= n, IndexError, "embedding: index ", ix.to(Device::cpu()).data<int64_t>()[first],
                     " at position ", first, " (row-major in indices ", shapeToString(indices.shape()),
                     ") is out of range for ", v, " embeddings");
  }
  return y;
}

Tensor embeddingBackward(const Tensor& gy0, const Tensor& indices, int64_t num_rows, int64_t padding_idx) {
  checkSameDevice("embedding backward", gy0, indices);
  const Tensor gy = gy0.contiguous(), keys = indices.contiguous();
  const int64_t n = keys.numel(), d = lastDim(gy);
  Tensor gw = Tensor::zeros({num_rows, d}, gy.dtype(), gy.device());
  if (n == 0 || d == 0) return gw;
  cudaStream_t stream = streamOf(gy);
  Tensor pos = emptyOn({n}, DType::i64, gy), keys_sorted = emptyOn({n}, DType::i64, gy),
         pos_sorted = emptyOn({n}, DType::i64, gy);
  iota<<<blocksFor(n), kBlock, 0, stream>>>(static_cast<int64_t*>(pos.devicePtr()), n);
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  const auto* kin = static_cast<const int64_t*>(keys.devicePtr());
  auto* kout = static_cast<int64_t*>(keys_sorted.devicePtr());
  const auto* pin = static_cast<const int64_t*>(pos.devicePtr());
  auto* pout = static_cast<int64_t*>(pos_sorted.devicePtr());
  size_t bytes = 0;
  LOCKSTEP_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, bytes, kin, kout, pin, pout, n, 0, 64, stream));
  Tensor temp = emptyOn({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, DType::u8, gy);
  LOCKSTEP_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp.devicePtr(), bytes, kin, kout, pin, pout, n, 0, 64, stream));
  visitFloating("embedding backward", gy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    sumRuns<T><<<blocksFor(n * d), kBlock, 0, stream>>>(static_cast<T*>(gw.devicePtr()),
                                                        static_cast<const T*>(gy.devicePtr()), kout, pout, n,
                                                        d, num_rows, padding_idx);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
  return gw;
}

RmsNormOutput rmsNormForward(const Tensor& x0, const Tensor& weight, double eps, DType y_dtype) {
  if (weight.defined()) checkSameDevice("rms_norm", x0, weight);
  const Tensor x = x0.contiguous(), w = weight.defined() ? weight.contiguous() : weight;
  const int64_t d = lastDim(x), m = d == 0 ? 0 : x.numel() / d;
  RmsNormOutput r{emptyOn(x.shape(), y_dtype, x), emptyOn({m}, statsDType(x.dtype()), x)};
  if (m == 0) return r;
  visitFloating("rms_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    A* rs = static_cast<A*>(r.rstd.devicePtr());
    const T *px = static_cast<const T*>(x.devicePtr()), *pw = devicePtrOrNull<const T>(w);
    const A e = static_cast<A>(eps);
    auto run = [&](auto out_tag) {
      using O = decltype(out_tag);
      O* y = static_cast<O*>(r.y.devicePtr());
      launchRowGroups(
          m, d, streamOf(x),
          [&](unsigned b, cudaStream_t s) {
            rmsForwardRows<32, T, O><<<b, kBlock, 0, s>>>(y, rs, px, pw, m, d, e);
          },
          [&](unsigned b, cudaStream_t s) {
            rmsForwardRows<0, T, O><<<b, kBlock, 0, s>>>(y, rs, px, pw, m, d, e);
          });
    };
    if (!visitNarrowOf<T>(y_dtype, x.dtype(), run)) {
      r.y = emptyOn(x.shape(), x.dtype(), x);  // computed in x's dtype; kernels::rmsNormForward casts
      run(T{});
    }
  });
  return r;
}

RmsNormGrads rmsNormBackward(const Tensor& gy0, const Tensor& x0, const Tensor& rstd0, const Tensor& weight,
                             Tensor* gx_into) {
  for (const Tensor* p : {&gy0, &rstd0, &weight})
    if (p->defined()) checkSameDevice("rms_norm backward", x0, *p);
  if (gx_into) {
    checkSameDevice("rms_norm backward", x0, *gx_into);
    LOCKSTEP_CHECK(
        gx_into->isContiguous() && gx_into->shape() == x0.shape() && gx_into->dtype() == x0.dtype(),
        "rms_norm backward: the held gradient ", gx_into->describe(), " does not fit ", x0.describe());
  }
  const DType st = statsDType(x0.dtype());
  // gy as it is where the kernels read its dtype (x's, or bf16/f16 for an f32 x), else in x's.
  const bool as_is = narrowReadable(gy0.dtype(), x0.dtype());
  const Tensor x = x0.contiguous(), gy = (as_is ? gy0 : gy0.to(x0.dtype())).contiguous(),
               rstd = rstd0.to(st).contiguous(), w = weight.defined() ? weight.contiguous() : weight;
  const int64_t d = lastDim(x), m = d == 0 ? 0 : x.numel() / d;
  RmsNormGrads g{gx_into ? *gx_into : emptyOn(x.shape(), x.dtype(), x), Tensor()};
  Tensor sum;  // [d] column sums of g x s, in the compute type
  if (m > 0) {
    visitFloating("rms_norm backward", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using A = ComputeT<T>;
      T* pgx = static_cast<T*>(g.gx.devicePtr());
      const T *px = static_cast<const T*>(x.devicePtr()), *pw = devicePtrOrNull<const T>(w);
      const A* pr = static_cast<const A*>(rstd.devicePtr());
      const bool ran = visitNarrowOf<T>(gy.dtype(), x.dtype(), [&](auto g_tag) {
        using GT = decltype(g_tag);
        const GT* pg = static_cast<const GT*>(gy.devicePtr());
        launchRowGroups(
            m, d, streamOf(x),
            [&](unsigned b, cudaStream_t s) {
              rmsBackwardRows<32, T, GT><<<b, kBlock, 0, s>>>(pgx, pg, px, pr, pw, m, d, gx_into != nullptr);
            },
            [&](unsigned b, cudaStream_t s) {
              rmsBackwardRows<0, T, GT><<<b, kBlock, 0, s>>>(pgx, pg, px, pr, pw, m, d, gx_into != nullptr);
            });
        if (weight.defined())
          sum = columnSums<A, 1>(m, d, st, x, {true}, RmsWeightTerm<T, GT>{pg, px, pr, d})[0];
      });
      LOCKSTEP_CHECK(ran, "rms_norm backward: gradient dtype ", dtypeName(gy.dtype()), " left uncast");
    });
  }
  if (gx_into) g.gx = Tensor();
  if (weight.defined()) {
    g.gweight =
        m == 0 ? Tensor::zeros(weight.shape(), weight.dtype(), weight.device()) : sum.to(weight.dtype());
  }
  return g;
}

Tensor swigluForward(const Tensor& gate, const Tensor& up) {
  checkSameDevice("swiglu", gate, up);
  Tensor y = emptyOn(gate.shape(), gate.dtype(), gate);
  visitFloating("swiglu", gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launchMap<T, 2>(y, {gate, up}, SwigluFn<ComputeT<T>>{});
  });
  return y;
}

std::pair<Tensor, Tensor> swigluBackward(const Tensor& gy, const Tensor& gate, const Tensor& up) {
  checkSameDevice("swiglu backward", gate, up);
  checkSameDevice("swiglu backward", gate, gy);
  Tensor gg = emptyOn(gate.shape(), gate.dtype(), gate), gu = emptyOn(gate.shape(), gate.dtype(), gate);
  visitFloating("swiglu backward", gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    launchMap<T, 3>(gg, {gy, gate, up}, SwigluGateGradFn<C>{});
    launchMap<T, 3>(gu, {gy, gate, up}, SwigluUpGradFn<C>{});
  });
  return {gg, gu};
}

Tensor rotary(const Tensor& x0, const Tensor& cos, const Tensor& sin, int sign) {
  checkSameDevice("rotary", x0, cos);
  checkSameDevice("rotary", x0, sin);
  const Tensor x = x0.contiguous();
  const DType st = statsDType(x.dtype());
  const Tensor c = cos.to(st).contiguous(), s = sin.to(st).contiguous();
  const int64_t t = x.size(x.dim() - 2), h = x.size(x.dim() - 1) / 2;
  const int64_t rows = h == 0 ? 0 : x.numel() / (2 * h);
  Tensor y = emptyOn(x.shape(), x.dtype(), x);
  if (rows == 0) return y;
  visitFloating("rotary", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    rotateRows<T><<<blocksFor(rows * h), kBlock, 0, streamOf(x)>>>(
        static_cast<T*>(y.devicePtr()), static_cast<const T*>(x.devicePtr()),
        static_cast<const A*>(c.devicePtr()), static_cast<const A*>(s.devicePtr()), rows, t, h,
        static_cast<A>(sign));
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
  return y;
}

}  // namespace lockstep::kernels::cuda
