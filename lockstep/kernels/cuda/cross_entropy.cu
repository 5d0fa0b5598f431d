// Cross-entropy on a GPU: one pass per row gives the logsumexp (kept for backward) and the loss
// (log-softmax + NLL + label smoothing fused); backward writes softmax - smoothed one-hot, scaled,
// straight from the logits and that logsumexp. See loss.h.
#include "lockstep/kernels/cuda/loss.h"
#include "lockstep/kernels/cuda/loss_reduce.cuh"

namespace lockstep::kernels::cuda {

namespace {

// Loads in flight per thread: a row's elements j, j + W, ..., j + (kUnroll - 1) W are read before
// any is used, so a block keeps kUnroll coalesced loads of the row outstanding (a GPT-2 row is
// 50,257 logits: one load at a time left the kernel at a third of the GPU's memory bandwidth).
constexpr int kUnroll = 8;

// The running max m and sum s of exp(v - m) over the values seen (one exp per value, one more when
// the max moves); -inf values add nothing, a NaN makes both NaN.
template <typename A>
__device__ __forceinline__ void online(A v, A& m, A& s) {
  if (v > m) {
    s = s * dExp(m - v) + A(1);
    m = v;
  } else if (v != v) {
    m = v;
    s = v;
  } else if (v > -std::numeric_limits<A>::infinity()) {
    s += dExp(v - m);
  }
}

// fn(v, j) for each element j of a row this lane takes (lane, lane + W, ...), the values widened to
// A: kUnroll loads in flight before any value is used.
template <typename R, typename A, typename T, typename Fn>
__device__ __forceinline__ void forRow(const T* row, int64_t c, Fn&& fn) {
  const int64_t w = R::width();
  int64_t j = R::lane();
  for (; j + (kUnroll - 1) * w < c; j += kUnroll * w) {
    A v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = castTo<A>(row[j + u * w]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fn(v[u], j + u * w);
  }
  for (; j < c; j += w) fn(castTo<A>(row[j]), j);
}

// out[j] = (exp(row[j] - l) - off - on [j == k]) * s for one row, by the lanes of its row group;
// out may be row itself (each element is read before the same thread writes it).
template <typename R, typename T, typename A = ComputeT<T>>
__device__ __forceinline__ void gradientRow(T* out, const T* row, A l, int64_t k, A s, int64_t c,
                                            int64_t classes, A on, A off, int64_t ignore_index) {
  const bool ignored = k == ignore_index, bad = !ignored && (k < 0 || k >= classes);
  forRow<R, A>(row, c, [&](A v, int64_t j) {
    out[j] = castTo<T>(ignored ? A(0) : bad ? nanOf<A>() : (dExp(v - l) - off - (j == k ? on : A(0))) * s);
  });
}

// Row r: lse[r], and its loss into per_out (reduction none: x's dtype, or f32 for f32_loss) or
// per_acc (f64); one pass over the row (the max and the sum of exponentials together, online).
// With gx (and g, the rows' gradients of a reduction none), the row's dL/dlogits too, right after
// (gradientRow: the row read again, from cache where it is still there, rather than by a separate
// backward kernel), the values crossEntropyBackwardRows writes; gx never overlaps x.
template <int G, typename T, typename O>
__global__ void crossEntropyRows(O* per_out, double* per_acc, ComputeT<T>* __restrict__ lse,
                                 const T* __restrict__ x, const int64_t* __restrict__ target, int64_t m,
                                 int64_t c, int64_t classes, ComputeT<T> on, ComputeT<T> off,
                                 int64_t ignore_index, T* gx, const ComputeT<T>* __restrict__ g) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  __shared__ A shm[32];
  const A lowest = -std::numeric_limits<A>::infinity();
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const T* row = x + r * c;
    A mx = lowest, se = A(0), rowsum = A(0);
    forRow<R, A>(row, c, [&](A v, int64_t) {
      rowsum += v;
      online(v, mx, se);
    });
    const A row_max = R::max(mx, shm, lowest);
    rowsum = R::sum(rowsum, shm);
    // This thread's sum rescaled to the row's max (nothing when it saw only -inf or nothing).
    se = R::sum(se == A(0) ? A(0) : se * dExp(mx - row_max), shm);
    const A l = row_max + dLog(se);
    const int64_t k = target[r];
    if (R::lane() == 0) {
      lse[r] = l;
      // The smoothing term only with smoothing: a masked (-inf) logit makes it infinite.
      const A smoothed = off > A(0) ? off * (A(c) * l - rowsum) : A(0);
      const A loss = k == ignore_index       ? A(0)
                     : k < 0 || k >= classes ? nanOf<A>()
                                             : on * (l - castTo<A>(row[k])) + smoothed;
      if (per_out)
        per_out[r] = castTo<O>(loss);
      else
        per_acc[r] = static_cast<double>(loss);
    }
    if (gx) gradientRow<R, T>(gx + r * c, row, l, k, g[r], c, classes, on, off, ignore_index);
  }
}

// gx[r, j] = (exp(x[r, j] - lse[r]) - off - on [j == k]) * s_r, s_r = g[r] (none) or scale[0]. gx
// may be x itself (each element is read before the same thread writes it).
template <int G, typename T>
__global__ void crossEntropyBackwardRows(T* gx, const T* x, const ComputeT<T>* __restrict__ lse,
                                         const int64_t* __restrict__ target, const ComputeT<T>* g,
                                         const ComputeT<T>* scale, int64_t m, int64_t c, int64_t classes,
                                         ComputeT<T> on, ComputeT<T> off, int64_t ignore_index) {
  using R = RowGroup<G>;
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    gradientRow<R, T>(gx + r * c, x + r * c, lse[r], target[r], scale ? scale[0] : g[r], c, classes, on, off,
                      ignore_index);
  }
}

// w[i] = 0 for an ignored row, else 1 (sum) or 1 / the rows kept (mean; NaN for every row when none
// is kept: the mean over no rows). One block.
template <typename A>
__global__ void rowWeights(A* __restrict__ w, const int64_t* __restrict__ target, int64_t n,
                           int64_t ignore_index, bool mean) {
  __shared__ double shm[32];
  double kept = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) kept += target[i] != ignore_index;
  kept = blockSum(kept, shm);
  const A share = !mean ? A(1) : kept > 0 ? A(1) / A(kept) : nanOf<A>();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    w[i] = target[i] == ignore_index && kept > 0 ? A(0) : share;
}

}  // namespace

Tensor crossEntropyRowWeights(const Tensor& target, int64_t ignore_index, LossReduction reduction,
                              DType dtype) {
  const Tensor tg = target.contiguous();
  const int64_t n = tg.numel();
  Tensor w = Tensor::empty({n}, dtype, MemoryFormat::contiguous, tg.device());
  LOCKSTEP_ENFORCE(dtype == DType::f32 || dtype == DType::f64, ValueError,
                   "cross_entropy row weights: f32 or f64, got ", dtypeName(dtype));
  auto run = [&](auto tag) {
    using A = decltype(tag);
    rowWeights<A><<<1, kFinishBlock, 0, streamOf(tg)>>>(static_cast<A*>(w.devicePtr()),
                                                        static_cast<const int64_t*>(tg.devicePtr()), n,
                                                        ignore_index, reduction == LossReduction::mean);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  };
  if (dtype == DType::f32)
    run(float{});
  else
    run(double{});
  return w;
}

namespace {
// crossEntropyForward, and with gx the gradient of a reduction none from the rows' gradients g
// ([N], the compute dtype) written into it in the same kernel.
std::pair<Tensor, Tensor> forward(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p,
                                  Tensor* gx, const Tensor* g) {
  checkSameDevice("cross_entropy", logits, target);
  const Tensor x = logits.contiguous(), tg = target.contiguous();
  const int64_t n = x.size(0), c = x.size(1), classes = p.classes > 0 ? p.classes : c;
  const bool none = p.reduction == LossReduction::none;
  // f32_loss: bf16/f16 logits read as they are, the loss in their compute dtype (f32).
  const DType loss_dtype = p.f32_loss ? statsDType(x.dtype()) : x.dtype();
  Tensor lse = Tensor::empty({n}, statsDType(x.dtype()), MemoryFormat::contiguous, x.device());
  Tensor loss;
  visitFloating("cross_entropy", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = ComputeT<T>;
    const A on = static_cast<A>(1.0 - p.label_smoothing);
    const A off = c > 0 ? static_cast<A>(p.label_smoothing / static_cast<double>(c)) : A(0);
    A* pl = static_cast<A*>(lse.devicePtr());
    const T* px = static_cast<const T*>(x.devicePtr());
    const int64_t* pt = static_cast<const int64_t*>(tg.devicePtr());
    const int64_t* mean_target = p.reduction == LossReduction::mean ? pt : nullptr;
    T* pgx = gx ? static_cast<T*>(gx->devicePtr()) : nullptr;
    const Tensor gr = g ? g->to(dtypeOf<A>).contiguous() : Tensor();
    const A* pg = g ? static_cast<const A*>(gr.devicePtr()) : nullptr;
    auto run = [&](auto out_tag) {
      using O = decltype(out_tag);
      Tensor per =
          none ? Tensor::empty({n}, loss_dtype, MemoryFormat::contiguous, x.device()) : f64Scratch(n, x);
      O* per_out = none ? static_cast<O*>(per.devicePtr()) : nullptr;
      double* per_acc = none ? nullptr : static_cast<double*>(per.devicePtr());
      launchRowGroups(
          n, c, streamOf(x),
          [&](unsigned b, cudaStream_t s) {
            crossEntropyRows<32, T, O><<<b, kBlock, 0, s>>>(per_out, per_acc, pl, px, pt, n, c, classes, on,
                                                            off, p.ignore_index, pgx, pg);
          },
          [&](unsigned b, cudaStream_t s) {
            crossEntropyRows<0, T, O><<<b, kBlock, 0, s>>>(per_out, per_acc, pl, px, pt, n, c, classes, on,
                                                           off, p.ignore_index, pgx, pg);
          });
      loss = none ? per : finish<O>(per, loss_dtype, mean_target, p.ignore_index, 1.0);
    };
    if (loss_dtype == x.dtype())
      run(T{});
    else
      run(A{});
  });
  return {loss, lse};
}
}  // namespace

std::pair<Tensor, Tensor> crossEntropyForward(const Tensor& logits, const Tensor& target,
                                              const CrossEntropyParams& p) {
  return forward(logits, target, p, nullptr, nullptr);
}

std::pair<Tensor, Tensor> crossEntropyWithGradInto(Tensor& out, const Tensor& row_grad, const Tensor& logits,
                                                   const Tensor& target, const CrossEntropyParams& p) {
  checkSameDevice("cross_entropy", out, logits);
  checkSameDevice("cross_entropy", row_grad, logits);
  LOCKSTEP_CHECK(p.reduction == LossReduction::none && out.isContiguous() && out.shape() == logits.shape() &&
                     out.dtype() == logits.dtype(),
                 "cross_entropy with its gradient: a reduction none and a contiguous gradient of the logits' "
                 "shape and dtype, got ",
                 out.describe(), " for ", logits.describe());
  // Not over the logits: a row's gradient is written while other lanes may still read the row (the
  // target's logit for the loss), which only a separate backward pass may do in place.
  LOCKSTEP_CHECK(!out.sharesStorage(logits),
                 "cross_entropy with its gradient: the gradient must not overlap the logits, got ",
                 out.describe());
  return forward(logits, target, p, &out, &row_grad);
}

namespace {
// gx (contiguous [N, C], the logits' dtype) = dL/dlogits.
void backwardInto(Tensor& gx, const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                  const Tensor& target, const CrossEntropyParams& p) {
  checkSameDevice("cross_entropy backward", gloss, logits);
  checkSameDevice("cross_entropy backward", lse, logits);
  checkSameDevice("cross_entropy backward", target, logits);
  checkSameDevice("cross_entropy backward", gx, logits);
  const Tensor x = logits.contiguous(), tg = target.contiguous();
  const int64_t n = x.size(0), c = x.size(1), classes = p.classes > 0 ? p.classes : c;
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
              <<<b, kBlock, 0, s>>>(pgx, px, pl, pt, pg, ps, n, c, classes, on, off, p.ignore_index);
        },
        [&](unsigned b, cudaStream_t s) {
          crossEntropyBackwardRows<0, T>
              <<<b, kBlock, 0, s>>>(pgx, px, pl, pt, pg, ps, n, c, classes, on, off, p.ignore_index);
        });
  });
}
}  // namespace

Tensor crossEntropyBackward(const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, const CrossEntropyParams& p) {
  Tensor gx = Tensor::empty({logits.size(0), logits.size(1)}, logits.dtype(), MemoryFormat::contiguous,
                            logits.device());
  backwardInto(gx, gloss, logits, lse, target, p);
  return gx;
}

bool crossEntropyBackwardInto(Tensor& out, const Tensor& gloss, const Tensor& logits, const Tensor& lse,
                              const Tensor& target, const CrossEntropyParams& p) {
  if (!out.isContiguous() || out.shape() != logits.shape() || out.dtype() != logits.dtype()) return false;
  backwardInto(out, gloss, logits, lse, target, p);
  return true;
}
}  // namespace lockstep::kernels::cuda
