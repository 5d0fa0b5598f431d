// Layer normalisation forward and backward on a GPU: a warp per row (a block for rows longer than
// kWarpRowLimit), two passes over the row for the mean and the variance as the CPU reference does.
#include <algorithm>

#include "lockstep/kernels/cuda/block_reduce.cuh"
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/layer_norm.h"
#include "lockstep/kernels/cuda/reduce.h"

namespace lockstep::kernels::cuda {

namespace {

template <int G, typename T, typename O>
__global__ void forwardRows(O* __restrict__ y, ComputeT<T>* __restrict__ mean, ComputeT<T>* __restrict__ var,
                            const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                            int64_t m, int64_t n, ComputeT<T> eps) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  __shared__ A shm[32];
  const A inv_n = A(1) / static_cast<A>(n);
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const T* row = x + r * n;
    A s = A(0);
    for (int64_t j = R::lane(); j < n; j += R::width()) s += castTo<A>(row[j]);
    const A mu = R::sum(s, shm) * inv_n;
    A sq = A(0);
    for (int64_t j = R::lane(); j < n; j += R::width()) {
      const A d = castTo<A>(row[j]) - mu;
      sq += d * d;
    }
    const A v = R::sum(sq, shm) * inv_n;
    const A rstd = A(1) / dSqrt(v + eps);
    O* out = y + r * n;
    for (int64_t j = R::lane(); j < n; j += R::width()) {
      A o = (castTo<A>(row[j]) - mu) * rstd;
      if (w) o *= castTo<A>(w[j]);
      if (b) o += castTo<A>(b[j]);
      out[j] = castTo<O>(o);
    }
    if (R::lane() == 0) {
      mean[r] = mu;
      var[r] = v;
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w, dy of type GT (x's, or
// bf16/f16 for f32 x). With accumulate, gx += dx: dx rounded to T, then the sum (the values of a
// separate add).
template <int G, typename T, typename GT>
__global__ void backwardRows(T* __restrict__ gx, const GT* __restrict__ gy, const T* __restrict__ x,
                             const ComputeT<T>* __restrict__ mean, const ComputeT<T>* __restrict__ var,
                             const T* __restrict__ w, int64_t m, int64_t n, ComputeT<T> eps,
                             bool accumulate) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  __shared__ A shm[32];
  const A inv_n = A(1) / static_cast<A>(n);
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const T* xr = x + r * n;
    const GT* gr = gy + r * n;
    const A mu = mean[r], rstd = A(1) / dSqrt(var[r] + eps);
    A sg = A(0), sgx = A(0);
    for (int64_t j = R::lane(); j < n; j += R::width()) {
      const A xhat = (castTo<A>(xr[j]) - mu) * rstd;
      const A g = castTo<A>(gr[j]) * (w ? castTo<A>(w[j]) : A(1));
      sg += g;
      sgx += g * xhat;
    }
    const A mean_g = R::sum(sg, shm) * inv_n, mean_gx = R::sum(sgx, shm) * inv_n;
    for (int64_t j = R::lane(); j < n; j += R::width()) {
      const A dy = castTo<A>(gr[j]);
      const A xhat = (castTo<A>(xr[j]) - mu) * rstd;
      const A g = dy * (w ? castTo<A>(w[j]) : A(1));
      const T d = castTo<T>(rstd * (g - mean_g - xhat * mean_gx));
      gx[r * n + j] = accumulate ? castTo<T>(dAddRn(castTo<A>(gx[r * n + j]), castTo<A>(d))) : d;
    }
  }
}

// The weight's and bias's gradients are column sums over the m rows: gw[j] = sum_r dy * xhat,
// gb[j] = sum_r dy, read straight from dy, x and the row statistics (no [m, n] f32 products written
// and read back: at GPT-2's 16,384 x 768 that was 200 MB of traffic a LayerNorm). A block of
// (32, kColumnRows) threads takes 32 columns of a chunk of rows: each thread sums every
// kColumnRows-th row of the chunk for its column (a warp reads 32 adjacent elements of a row), the
// block adds its threads' sums in a fixed order into partial[chunk][j]; cuda::reduce then sums the
// chunks. The same grid for the same (m, n): the sums repeat bitwise.
constexpr int kColumnRows = 8;

template <typename T, typename GT>
__global__ void columnPartials(ComputeT<T>* __restrict__ pw, ComputeT<T>* __restrict__ pb,
                               const GT* __restrict__ gy, const T* __restrict__ x,
                               const ComputeT<T>* __restrict__ mean, const ComputeT<T>* __restrict__ var,
                               int64_t m, int64_t n, int64_t chunk_rows, ComputeT<T> eps) {
  using A = ComputeT<T>;
  __shared__ A sw[kColumnRows][33], sb[kColumnRows][33];
  const int64_t j = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows, r1 = min(m, r0 + chunk_rows);
  A w = A(0), b = A(0);
  if (j < n) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) {
      const A dy = castTo<A>(gy[r * n + j]);
      const A rstd = A(1) / dSqrt(var[r] + eps);
      w += dy * ((castTo<A>(x[r * n + j]) - mean[r]) * rstd);
      b += dy;
    }
  }
  sw[threadIdx.y][threadIdx.x] = w;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    for (int k = 1; k < kColumnRows; ++k) {
      w += sw[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    if (pw) pw[int64_t(blockIdx.y) * n + j] = w;
    if (pb) pb[int64_t(blockIdx.y) * n + j] = b;
  }
}

// Chunks of rows per column tile: about 1,024 blocks in all (a few waves on an H100's 132 SMs), at
// least kColumnRows rows a chunk, at most 65,535 chunks (the grid's y limit).
int64_t columnChunks(int64_t m, int64_t n) {
  const int64_t tiles = (n + 31) / 32;
  const int64_t by_blocks = std::max<int64_t>(1, 1024 / tiles);
  const int64_t by_rows = std::max<int64_t>(1, (m + kColumnRows - 1) / kColumnRows);
  return std::min<int64_t>({by_blocks, by_rows, 65535});
}

}  // namespace

LayerNormOutput layerNormForward(const Tensor& x0, int64_t n, const Tensor& weight, const Tensor& bias,
                                 double eps, DType y_dtype) {
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) checkSameDevice("layer_norm", x0, *p);
  const Tensor x = x0.contiguous(), w = weight.defined() ? weight.contiguous() : weight,
               b = bias.defined() ? bias.contiguous() : bias;
  const int64_t m = n == 0 ? 0 : x.numel() / n;
  LayerNormOutput r{emptyOn(x.shape(), y_dtype, x), emptyOn({m}, statsDType(x.dtype()), x),
                    emptyOn({m}, statsDType(x.dtype()), x)};
  if (m == 0) return r;
  visitFloating("layer_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    A *mu = static_cast<A*>(r.mean.devicePtr()), *var = static_cast<A*>(r.variance.devicePtr());
    const T *px = static_cast<const T*>(x.devicePtr()), *pw = devicePtrOrNull<const T>(w),
            *pb = devicePtrOrNull<const T>(b);
    const A e = static_cast<A>(eps);
    auto run = [&](auto out_tag) {
      using O = decltype(out_tag);
      O* y = static_cast<O*>(r.y.devicePtr());
      launchRowGroups(
          m, n, streamOf(x),
          [&](unsigned blocks, cudaStream_t s) {
            forwardRows<32, T, O><<<blocks, kBlock, 0, s>>>(y, mu, var, px, pw, pb, m, n, e);
          },
          [&](unsigned blocks, cudaStream_t s) {
            forwardRows<0, T, O><<<blocks, kBlock, 0, s>>>(y, mu, var, px, pw, pb, m, n, e);
          });
    };
    if (!visitNarrowOf<T>(y_dtype, x.dtype(), run)) {
      r.y = emptyOn(x.shape(), x.dtype(), x);  // computed in x's dtype; kernels::layerNormForward casts
      run(T{});
    }
  });
  return r;
}

LayerNormGrads layerNormBackward(const Tensor& gy0, const Tensor& x0, const Tensor& mean0,
                                 const Tensor& variance0, int64_t n, const Tensor& weight, const Tensor& bias,
                                 double eps, Tensor* gx_into) {
  for (const Tensor* p : {&gy0, &mean0, &variance0, &weight, &bias})
    if (p->defined()) checkSameDevice("layer_norm backward", x0, *p);
  if (gx_into) {
    checkSameDevice("layer_norm backward", x0, *gx_into);
    LOCKSTEP_CHECK(
        gx_into->isContiguous() && gx_into->shape() == x0.shape() && gx_into->dtype() == x0.dtype(),
        "layer_norm backward: the held gradient ", gx_into->describe(), " does not fit ", x0.describe());
  }
  const DType st = statsDType(x0.dtype());
  // gy as it is where the kernels read its dtype (x's, or bf16/f16 for an f32 x), else in x's.
  const bool as_is = narrowReadable(gy0.dtype(), x0.dtype());
  const Tensor x = x0.contiguous(), gy = (as_is ? gy0 : gy0.to(x0.dtype())).contiguous(),
               mean = mean0.to(st).contiguous(), var = variance0.to(st).contiguous(),
               w = weight.defined() ? weight.contiguous() : weight;
  const int64_t m = n == 0 ? 0 : x.numel() / n;
  LayerNormGrads g;
  g.gx = gx_into ? *gx_into : emptyOn(x.shape(), x.dtype(), x);
  // Per chunk of rows, the column sums of dy * xhat (dL/dweight) and of dy (dL/dbias), in the
  // compute type.
  const int64_t chunks = m > 0 && n > 0 ? columnChunks(m, n) : 0;
  Tensor part_w = weight.defined() && chunks > 0 ? emptyOn({chunks, n}, st, x) : Tensor();
  Tensor part_b = bias.defined() && chunks > 0 ? emptyOn({chunks, n}, st, x) : Tensor();
  if (m > 0) {
    visitFloating("layer_norm backward", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using A = ComputeT<T>;
      T* pgx = static_cast<T*>(g.gx.devicePtr());
      const T *px = static_cast<const T*>(x.devicePtr()), *pw = devicePtrOrNull<const T>(w);
      const A *pm = static_cast<const A*>(mean.devicePtr()), *pv = static_cast<const A*>(var.devicePtr());
      const A e = static_cast<A>(eps);
      const bool ran = visitNarrowOf<T>(gy.dtype(), x.dtype(), [&](auto g_tag) {
        using GT = decltype(g_tag);
        const GT* pg = static_cast<const GT*>(gy.devicePtr());
        launchRowGroups(
            m, n, streamOf(x),
            [&](unsigned blocks, cudaStream_t s) {
              backwardRows<32, T, GT>
                  <<<blocks, kBlock, 0, s>>>(pgx, pg, px, pm, pv, pw, m, n, e, gx_into != nullptr);
            },
            [&](unsigned blocks, cudaStream_t s) {
              backwardRows<0, T, GT>
                  <<<blocks, kBlock, 0, s>>>(pgx, pg, px, pm, pv, pw, m, n, e, gx_into != nullptr);
            });
        if (part_w.defined() || part_b.defined()) {
          const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(chunks));
          columnPartials<T, GT><<<grid, dim3(32, kColumnRows), 0, streamOf(x)>>>(
              devicePtrOrNull<A>(part_w), devicePtrOrNull<A>(part_b), pg, px, pm, pv, m, n,
              (m + chunks - 1) / chunks, e);
          LOCKSTEP_CUDA_CHECK(cudaGetLastError());
        }
      });
      LOCKSTEP_CHECK(ran, "layer_norm backward: gradient dtype ", dtypeName(gy.dtype()), " left uncast");
    });
  }
  if (gx_into) g.gx = Tensor();
  // The chunks' partial sums summed (in the compute type), then rounded once to the parameter's dtype.
  auto columnSums = [&](const Tensor& parts, const Tensor& param) {
    if (!parts.defined()) return Tensor::zeros(param.shape(), param.dtype(), param.device());
    return cuda::reduce(ReduceOp::sum, parts, {0}, false).to(param.dtype()).reshape(param.shape());
  };
  if (weight.defined()) g.gweight = columnSums(part_w, weight);
  if (bias.defined()) g.gbias = columnSums(part_b, bias);
  return g;
}

}  // namespace lockstep::kernels::cuda
