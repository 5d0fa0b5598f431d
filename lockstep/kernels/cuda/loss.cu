// NLL and MSE losses on a GPU; see loss.h.
#include "lockstep/kernels/cuda/loss.h"
#include "lockstep/kernels/cuda/loss_reduce.cuh"

namespace lockstep::kernels::cuda {

namespace {

template <typename T>
__global__ void nllRows(T* per_out, double* per_acc, const T* __restrict__ lp,
                        const int64_t* __restrict__ target, int64_t m, int64_t c, int64_t ignore_index) {
  using A = ComputeT<T>;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < m;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = target[r];
    const A loss = k == ignore_index ? A(0) : k < 0 || k >= c ? nanOf<A>() : -castTo<A>(lp[r * c + k]);
    if (per_out)
      per_out[r] = castTo<T>(loss);
    else
      per_acc[r] = static_cast<double>(loss);
  }
}

// gx (zeros) gets -s_r at [r, target[r]]; a row with a bad target is NaN.
template <typename T>
__global__ void nllBackwardRows(T* gx, const int64_t* __restrict__ target, const ComputeT<T>* g,
                                const ComputeT<T>* scale, int64_t m, int64_t c, int64_t ignore_index) {
  using A = ComputeT<T>;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < m;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = target[r];
    if (k == ignore_index) continue;
    if (k < 0 || k >= c) {
      for (int64_t j = 0; j < c; ++j) gx[r * c + j] = castTo<T>(nanOf<A>());
      continue;
    }
    gx[r * c + k] = castTo<T>(-(scale ? scale[0] : g[r]));
  }
}

// Per-block sums of (a - b)^2 over contiguous a, b.
template <typename T>
__global__ void squaredDiffPartials(double* partial, const T* __restrict__ a, const T* __restrict__ b,
                                    int64_t n) {
  __shared__ double shm[32];
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double d =
        static_cast<double>(castTo<ComputeT<T>>(a[i])) - static_cast<double>(castTo<ComputeT<T>>(b[i]));
    s += d * d;
  }
  s = blockSum(s, shm);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <typename C>
struct SquaredDiff {
  __device__ C operator()(C a, C b) const { return (a - b) * (a - b); }
};
template <typename C>
struct MseGradNone {
  __device__ C operator()(C a, C b, C g) const { return C(2) * (a - b) * g; }
};
template <typename C>
struct MseGradReduced {
  const C* g;
  C factor;
  __device__ C operator()(C a, C b) const { return factor * (a - b) * g[0]; }
};

}  // namespace

Tensor nllLossForward(const Tensor& log_probs, const Tensor& target, LossReduction reduction,
                      int64_t ignore_index) {
  checkSameDevice("nll_loss", log_probs, target);
  const Tensor lp = log_probs.contiguous(), tg = target.contiguous();
  const int64_t n = lp.size(0), c = lp.size(1);
  const bool none = reduction == LossReduction::none;
  Tensor loss;
  visitFloating("nll_loss", lp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor per =
        none ? Tensor::empty({n}, lp.dtype(), MemoryFormat::contiguous, lp.device()) : f64Scratch(n, lp);
    const int64_t* pt = static_cast<const int64_t*>(tg.devicePtr());
    nllRows<T><<<blocksFor(n), kBlock, 0, streamOf(lp)>>>(
        none ? static_cast<T*>(per.devicePtr()) : nullptr,
        none ? nullptr : static_cast<double*>(per.devicePtr()), static_cast<const T*>(lp.devicePtr()), pt, n,
        c, ignore_index);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    loss =
        none ? per
             : finish<T>(per, lp.dtype(), reduction == LossReduction::mean ? pt : nullptr, ignore_index, 1.0);
  });
  return loss;
}

Tensor nllLossBackward(const Tensor& gloss, const Tensor& target, int64_t num_classes,
                       LossReduction reduction, int64_t ignore_index) {
  checkSameDevice("nll_loss backward", gloss, target);
  const Tensor tg = target.contiguous();
  const int64_t n = tg.size(0);
  Tensor gx = Tensor::zeros({n, num_classes}, gloss.dtype(), gloss.device());
  visitFloating("nll_loss", gloss.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    cudaStream_t stream = streamOf(gloss);
    const Tensor g = gloss.to(dtypeOf<A>).contiguous();
    const int64_t* pt = static_cast<const int64_t*>(tg.devicePtr());
    Tensor scale;
    if (reduction != LossReduction::none) {
      scale = Tensor::empty({1}, dtypeOf<A>, MemoryFormat::contiguous, gloss.device());
      rowScale<A><<<1, kFinishBlock, 0, stream>>>(static_cast<A*>(scale.devicePtr()),
                                                  static_cast<const A*>(g.devicePtr()), pt, n, ignore_index,
                                                  reduction == LossReduction::mean);
      LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    }
    nllBackwardRows<T><<<blocksFor(n), kBlock, 0, stream>>>(
        static_cast<T*>(gx.devicePtr()), pt, static_cast<const A*>(g.devicePtr()),
        scale.defined() ? static_cast<const A*>(scale.devicePtr()) : nullptr, n, num_classes, ignore_index);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
  return gx;
}

Tensor mseLossForward(const Tensor& input, const Tensor& target, LossReduction reduction) {
  checkSameDevice("mse_loss", input, target);
  Tensor loss;
  visitFloating("mse_loss", input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    if (reduction == LossReduction::none) {
      loss = Tensor::emptyLike(input);
      launchMap<T, 2>(loss, {input, target}, SquaredDiff<A>{});
      return;
    }
    // Row-major copies (when needed) pair the elements up whatever the operands' layouts.
    const Tensor a = input.contiguous(), b = target.contiguous();
    const int64_t n = a.numel();
    const unsigned blocks = blocksFor(n, 1024);
    Tensor partial = f64Scratch(blocks, a);
    squaredDiffPartials<T><<<blocks, kBlock, 0, streamOf(a)>>>(static_cast<double*>(partial.devicePtr()),
                                                               static_cast<const T*>(a.devicePtr()),
                                                               static_cast<const T*>(b.devicePtr()), n);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    loss = finish<T>(partial, a.dtype(), nullptr, 0,
                     reduction == LossReduction::mean ? static_cast<double>(n) : 1.0);
  });
  return loss;
}

Tensor mseLossBackward(const Tensor& gloss, const Tensor& input, const Tensor& target,
                       LossReduction reduction) {
  checkSameDevice("mse_loss backward", input, target);
  checkSameDevice("mse_loss backward", gloss, input);
  Tensor gx = Tensor::emptyLike(input);
  visitFloating("mse_loss", input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    if (reduction == LossReduction::none) {
      launchMap<T, 3>(gx, {input, target, gloss.to(input.dtype())}, MseGradNone<A>{});
      return;
    }
    const Tensor g = gloss.to(dtypeOf<A>).contiguous();
    const double n = static_cast<double>(input.numel());
    const A factor = static_cast<A>(reduction == LossReduction::mean ? 2.0 / n : 2.0);
    launchMap<T, 2>(gx, {input, target}, MseGradReduced<A>{static_cast<const A*>(g.devicePtr()), factor});
  });
  return gx;
}
}  // namespace lockstep::kernels::cuda
