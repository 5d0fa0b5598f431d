// Layer normalisation forward and backward on a GPU: a warp per row (a block for rows longer than
// kWarpRowLimit), two passes over the row for the mean and the variance as the CPU reference does.
#include <array>

#include "lockstep/kernels/cuda/block_reduce.cuh"
#include "lockstep/kernels/cuda/column_sums.cuh"
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

// The terms of the weight's and bias's gradients at (r, j): dy * xhat and dy (column sums, with
// column_sums.cuh, straight from dy, x and the row statistics).
template <typename T, typename GT>
struct GradTerms {
  using A = ComputeT<T>;
  const GT* gy;
  const T* x;
  const A *mean, *var;
  int64_t n;
  A eps;
  __device__ Terms<A, 2> operator()(int64_t r, int64_t j) const {
    const A dy = castTo<A>(gy[r * n + j]);
    const A rstd = A(1) / dSqrt(var[r] + eps);
    return {{dy * ((castTo<A>(x[r * n + j]) - mean[r]) * rstd), dy}};
  }
};

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
  std::array<Tensor, 2> sums;  // [n] column sums of dy * xhat and dy, in the compute type
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
        if (weight.defined() || bias.defined()) {
          sums = columnSums<A, 2>(m, n, st, x, {weight.defined(), bias.defined()},
                                  GradTerms<T, GT>{pg, px, pm, pv, n, e});
        }
      });
      LOCKSTEP_CHECK(ran, "layer_norm backward: gradient dtype ", dtypeName(gy.dtype()), " left uncast");
    });
  }
  if (gx_into) g.gx = Tensor();
  // The column sums (in the compute type) rounded once to the parameter's dtype; zeros for no rows.
  auto grad = [&](const Tensor& sum, const Tensor& param) {
    if (!sum.defined()) return Tensor::zeros(param.shape(), param.dtype(), param.device());
    return sum.to(param.dtype()).reshape(param.shape());
  };
  if (weight.defined()) g.gweight = grad(sums[0], weight);
  if (bias.defined()) g.gbias = grad(sums[1], bias);
  return g;
}

}  // namespace lockstep::kernels::cuda
