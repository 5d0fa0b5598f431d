// Cross-entropy on a GPU: one pass per row gives the logsumexp (kept for backward) and the loss
// (log-softmax + NLL + label smoothing fused); backward writes softmax - smoothed one-hot, scaled,
// straight from the logits and that logsumexp. See loss.h.
#include "lockstep/kernels/cuda/loss.h"
#include "lockstep/kernels/cuda/loss_reduce.cuh"

namespace lockstep::kernels::cuda {

namespace {

// Row r: lse[r], and its loss into per_out (reduction none, x's dtype) or per_acc (f64).
template <int G, typename T>
__global__ void crossEntropyRows(T* per_out, double* per_acc, ComputeT<T>* __restrict__ lse,
                                 const T* __restrict__ x, const int64_t* __restrict__ target, int64_t m,
                                 int64_t c, ComputeT<T> on, ComputeT<T> off, int64_t ignore_index) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  __shared__ A shm[32];
  const A lowest = -std::numeric_limits<A>::infinity();
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const T* row = x + r * c;
    A mx = lowest, rowsum = A(0);
    for (int64_t j = R::lane(); j < c; j += R::width()) {
      const A v = castTo<A>(row[j]);
      mx = v > mx || v != v ? v : mx;
      rowsum += v;
    }
    mx = R::max(mx, shm, lowest);
    rowsum = R::sum(rowsum, shm);
    A se = A(0);
    for (int64_t j = R::lane(); j < c; j += R::width()) se += dExp(castTo<A>(row[j]) - mx);
    se = R::sum(se, shm);
    if (R::lane() == 0) {
      const A l = mx + dLog(se);
      lse[r] = l;
      const int64_t k = target[r];
      const A loss = k == ignore_index ? A(0)
                     : k < 0 || k >= c ? nanOf<A>()
                                       : on * (l - castTo<A>(row[k])) + off * (A(c) * l - rowsum);
      if (per_out)
        per_out[r] = castTo<T>(loss);
      else
        per_acc[r] = static_cast<double>(loss);
    }
  }
}

// gx[r, j] = (exp(x[r, j] - lse[r]) - off - on [j == k]) * s_r, s_r = g[r] (none) or scale[0].
template <int G, typename T>
__global__ void crossEntropyBackwardRows(T* __restrict__ gx, const T* __restrict__ x,
                                         const ComputeT<T>* __restrict__ lse,
                                         const int64_t* __restrict__ target, const ComputeT<T>* g,
                                         const ComputeT<T>* scale, int64_t m, int64_t c, ComputeT<T> on,
                                         ComputeT<T> off, int64_t ignore_index) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const int64_t k = target[r];
    const A s = scale ? scale[0] : g[r];
    const A l = lse[r];
    const T* row = x + r * c;
    T* out = gx + r * c;
    const bool ignored = k == ignore_index, bad = !ignored && (k < 0 || k >= c);
    for (int64_t j = R::lane(); j < c; j += R::width()) {
      A v = ignored ? A(0)
            : bad   ? nanOf<A>()
                    : (dExp(castTo<A>(row[j]) - l) - off - (j == k ? on : A(0))) * s;
      out[j] = castTo<T>(v);
    }
  }
}

}  // namespace

std::pair<Tensor, Tensor> crossEntropyForward(const Tensor& logits, const Tensor& target,
                                              const CrossEntropyParams& p) {
  checkSameDevice("cross_entropy", logits, target);
  const Tensor x = logits.contiguous(), tg = target.contiguous();
  const int64_t n = x.size(0), c = x.size(1);
  const bool none = p.reduction == LossReduction::none;
  Tensor lse = Tensor::empty({n}, statsDType(x.dtype()), MemoryFormat::contiguous, x.device());
  Tensor loss;
  visitFloating("cross_entropy", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    const A on = static_cast<A>(1.0 - p.label_smoothing);
    const A off = c > 0 ? static_cast<A>(p.label_smoothing / static_cast<double>(c)) : A(0);
    Tensor per =
        none ? Tensor::empty({n}, x.dtype(), MemoryFormat::contiguous, x.device()) : f64Scratch(n, x);
    T* per_out = none ? static_cast<T*>(per.devicePtr()) : nullptr;
    double* per_acc = none ? nullptr : static_cast<double*>(per.devicePtr());
    A* pl = static_cast<A*>(lse.devicePtr());
    const T* px = static_cast<const T*>(x.devicePtr());
    const int64_t* pt = static_cast<const int64_t*>(tg.devicePtr());
    launchRowGroups(
        n, c, streamOf(x),
        [&](unsigned b, cudaStream_t s) {
          crossEntropyRows<32, T>
              <<<b, kBlock, 0, s>>>(per_out, per_acc, pl, px, pt, n, c, on, off, p.ignore_index);
        },
        [&](unsigned b, cudaStream_t s) {
          crossEntropyRows<0, T>
              <<<b, kBlock, 0, s>>>(per_out, per_acc, pl, px, pt, n, c, on, off, p.ignore_index);
        });
    loss = none ? per
                : finish<T>(per, x.dtype(), p.reduction == LossReduction::mean ? pt : nullptr, p.ignore_index,
                            1.0);
  });
  return {loss, lse};
}

Tensor crossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, const CrossEntropyParams& p) {
  checkSameDevice("cross_entropy backward", gloss, logits);
  checkSameDevice("cross_entropy backward", lse, logits);
  checkSameDevice("cross_entropy backward", target, logits);
  const Tensor x = logits.contiguous(), tg = target.contiguous();
  const int64_t n = x.size(0), c = x.size(1);
  Tensor gx = Tensor::empty({n, c}, x.dtype(), MemoryFormat::contiguous, x.device());
  visitFloating("cross_entropy", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    cudaStream_t stream = streamOf(x);
    const Tensor l = lse.to(dtypeOf<A>).contiguous(), g = gloss.to(dtypeOf<A>).contiguous();
    const int64_t* pt = static_cast<const int64_t*>(tg.devicePtr());
    Tensor scale;
    if (p.reduction != LossReduction::none) {
      scale = Tensor::empty({1}, dtypeOf<A>, MemoryFormat::contiguous, x.device());
      rowScale<A><<<1, kFinishBlock, 0, stream>>>(static_cast<A*>(scale.devicePtr()),
                                                  static_cast<const A*>(g.devicePtr()), pt, n, p.ignore_index,
                                                  p.reduction == LossReduction::mean);
      LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    }
    const A on = static_cast<A>(1.0 - p.label_smoothing);
    const A off = c > 0 ? static_cast<A>(p.label_smoothing / static_cast<double>(c)) : A(0);
    T* pgx = static_cast<T*>(gx.devicePtr());
    const T* px = static_cast<const T*>(x.devicePtr());
    const A* pl = static_cast<const A*>(l.devicePtr());
    const A* pg = static_cast<const A*>(g.devicePtr());
    const A* ps = scale.defined() ? static_cast<const A*>(scale.devicePtr()) : nullptr;
    launchRowGroups(
        n, c, stream,
        [&](unsigned b, cudaStream_t s) {
          crossEntropyBackwardRows<32, T>
              <<<b, kBlock, 0, s>>>(pgx, px, pl, pt, pg, ps, n, c, on, off, p.ignore_index);
        },
        [&](unsigned b, cudaStream_t s) {
          crossEntropyBackwardRows<0, T>
              <<<b, kBlock, 0, s>>>(pgx, px, pl, pt, pg, ps, n, c, on, off, p.ignore_index);
        });
  });
  return gx;
}
}  // namespace lockstep::kernels::cuda
