// Scaled dot-product attention on a GPU (see attention.h): a warp per row; lane l holds elements
// l, l + 32, ... of a head-dim row in registers (R of them). Keys (in the backward of k and v, query
// rows) come 32 at a time: each lane sums its part of the 32 dot products and one transposed warp
// reduction leaves lane t with score t, so the softmax, its exponentials and the dropout draws of a
// chunk run once per lane in parallel (a score at a time took 5 shuffles, 2 exponentials and a
// Philox call on every lane per key), and the weights go back to the lanes' rows by shuffles.
#include <limits>

#include "lockstep/kernels/cuda/attention.h"
#include "lockstep/kernels/cuda/block_reduce.cuh"
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/fused_attention.h"
#include "lockstep/kernels/dropout.h"

namespace lockstep::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;

struct Dims {
  int64_t b, h, hkv, t, s, d;
};

/// Element strides of the [B, heads, rows] dims of q, k or v (the last dim is contiguous).
struct HeadView {
  int64_t sb, sh, sr;
};

/// Attention's dropout: weight (b, h, i, j) is kept iff the draw at offset + ((b H + h) T + i) S + j is.
/// Each kernel calls resolve() first: in a CUDA graph the key and first counter are read from
/// device memory (kernels::PhiloxState), once per thread.
template <typename A>
struct Drop {
  bool on;
  PhiloxState philox;
  uint64_t threshold;
  A keep_scale;
  __device__ void resolve() { philox = philox.resolved(); }
  __device__ A factor(uint64_t counter) const {
    return dropoutKeepsBelow(philox.offset + counter, philox.key, threshold) ? keep_scale : A(0);
  }
};

template <typename A, int R, typename T>
__device__ __forceinline__ void loadRow(A (&r)[R], const T* __restrict__ p, int64_t d, int lane) {
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t c = lane + 32 * k;
    r[k] = c < d ? castTo<A>(p[c]) : A(0);
  }
}

template <typename A, int R, typename T>
__device__ __forceinline__ void storeRow(T* __restrict__ p, const A (&r)[R], A mul, int64_t d, int lane) {
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t c = lane + 32 * k;
    if (c < d) p[c] = castTo<T>(r[k] * mul);
  }
}

__device__ __forceinline__ int64_t warpRow() {
  return blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
}

// Keys (or query rows) are taken 32 at a time, one per lane: each lane first sums its share of the
// 32 dot products (its head-dim elements), then transposeSum hands lane t the whole of product t.
constexpr int kChunk = 32;

// v[t] holds this lane's part of sum t (t < 32); returns sum `lane`, reduced over the warp, in 31
// shuffles (one warpSum per sum would take 160): at each step a lane keeps the half of its sums that
// its half of the warp will own and adds its partner's part of that half.
template <typename A>
__device__ __forceinline__ A transposeSum(A (&v)[kChunk], int lane) {
#pragma unroll
  for (int step = kChunk / 2; step >= 1; step /= 2) {
    const bool upper = (lane & step) != 0;
#pragma unroll
    for (int t = 0; t < step; ++t) {
      const A send = upper ? v[t] : v[t + step];
      const A keep = upper ? v[t + step] : v[t];
      v[t] = keep + __shfl_xor_sync(0xffffffffu, send, step);
    }
  }
  return v[0];
}

// This lane's part of the dot product of the row in registers with the row at p.
template <typename A, int R, typename T>
__device__ __forceinline__ A partDot(const A (&r)[R], const T* __restrict__ p, int64_t d, int lane) {
  A part = A(0);
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t c = lane + 32 * k;
    if (c < d) part += r[k] * castTo<A>(p[c]);
  }
  return part;
}

// acc += w * row at p (this lane's elements).
template <typename A, int R, typename T>
__device__ __forceinline__ void addRow(A (&acc)[R], A w, const T* __restrict__ p, int64_t d, int lane) {
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t c = lane + 32 * k;
    if (c < d) acc[k] += w * castTo<A>(p[c]);
  }
}

template <typename T, int R>
__global__ void forwardKernel(T* __restrict__ out, ComputeT<T>* __restrict__ lse, const T* __restrict__ q,
                              HeadView qv, const T* __restrict__ k, HeadView kv, const T* __restrict__ v,
                              HeadView vv, Dims n, ComputeT<T> scale, bool causal, Drop<ComputeT<T>> drop) {
  using A = ComputeT<T>;
  drop.resolve();
  const int lane = threadIdx.x % 32;
  const int64_t row = warpRow();  // (b H + h) T + i
  if (row >= n.b * n.h * n.t) return;
  const int64_t i = row % n.t, bh = row / n.t, h = bh % n.h, b = bh / n.h, g = h / (n.h / n.hkv);
  const T* kb = k + b * kv.sb + g * kv.sh;
  const T* vb = v + b * vv.sb + g * vv.sh;
  A qr[R], acc[R];
  loadRow(qr, q + b * qv.sb + h * qv.sh + i * qv.sr, n.d, lane);
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = A(0);
  const A lowest = -std::numeric_limits<A>::infinity();
  A m = lowest, l = A(0);
  const int64_t lim = causal ? (i + 1 < n.s ? i + 1 : n.s) : n.s;
  for (int64_t j0 = 0; j0 < lim; j0 += kChunk) {
    // Lane t: the score of key j0 + t (-inf past the last visible key), its weight and dropout.
    A part[kChunk];
#pragma unroll
    for (int t = 0; t < kChunk; ++t)
      part[t] = j0 + t < lim ? partDot(qr, kb + (j0 + t) * kv.sr, n.d, lane) : A(0);
    const int64_t jl = j0 + lane;
    const bool seen = jl < lim;
    const A sum = transposeSum(part, lane);  // every lane takes part in the shuffles
    const A s = seen ? sum * scale : lowest;
    const A top = warpMax(s);
    const A mn = top > m ? top : m;
    const A corr = dExp(m - mn), e = seen ? dExp(s - mn) : A(0);
    l = l * corr + warpSum(e);
    const A w = drop.on && seen ? e * drop.factor(static_cast<uint64_t>(row * n.s + jl)) : e;
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] *= corr;
    const int64_t count = lim - j0 < kChunk ? lim - j0 : kChunk;
    for (int t = 0; t < count; ++t)
      addRow(acc, __shfl_sync(0xffffffffu, w, t), vb + (j0 + t) * vv.sr, n.d, lane);
    m = mn;
  }
  storeRow(out + row * n.d, acc, A(1) / l, n.d, lane);
  if (lane == 0) lse[row] = m + dLog(l);
}

// dsum[row] = dout_row . out_row (= sum_j P_ij dP_ij, dropout included).
template <typename T>
__global__ void rowDotKernel(ComputeT<T>* __restrict__ dsum, const T* __restrict__ gout,
                             const T* __restrict__ out, int64_t rows, int64_t d) {
  using A = ComputeT<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = warpRow();
  if (row >= rows) return;
  A part = A(0);
  for (int64_t c = lane; c < d; c += 32) part += castTo<A>(gout[row * d + c]) * castTo<A>(out[row * d + c]);
  part = warpSum(part);
  if (lane == 0) dsum[row] = part;
}

// dq_i = scale * sum_j P_ij (dP_ij - dsum_i) k_j with dP_ij = (dout_i . v_j) * dropout factor.
template <typename T, int R>
__global__ void gradQKernel(T* __restrict__ gq, const T* __restrict__ gout, const T* __restrict__ q,
                            HeadView qv, const T* __restrict__ k, HeadView kv, const T* __restrict__ v,
                            HeadView vv, const ComputeT<T>* __restrict__ lse,
                            const ComputeT<T>* __restrict__ dsum, Dims n, ComputeT<T> scale, bool causal,
                            Drop<ComputeT<T>> drop) {
  using A = ComputeT<T>;
  drop.resolve();
  const int lane = threadIdx.x % 32;
  const int64_t row = warpRow();
  if (row >= n.b * n.h * n.t) return;
  const int64_t i = row % n.t, bh = row / n.t, h = bh % n.h, b = bh / n.h, g = h / (n.h / n.hkv);
  const T* kb = k + b * kv.sb + g * kv.sh;
  const T* vb = v + b * vv.sb + g * vv.sh;
  A qr[R], gr[R], dq[R];
  loadRow(qr, q + b * qv.sb + h * qv.sh + i * qv.sr, n.d, lane);
  loadRow(gr, gout + row * n.d, n.d, lane);
#pragma unroll
  for (int r = 0; r < R; ++r) dq[r] = A(0);
  const A L = lse[row], D = dsum[row];
  const int64_t lim = causal ? (i + 1 < n.s ? i + 1 : n.s) : n.s;
  for (int64_t j0 = 0; j0 < lim; j0 += kChunk) {
    A ps[kChunk], pd[kChunk];
#pragma unroll
    for (int t = 0; t < kChunk; ++t) {
      const bool in = j0 + t < lim;
      ps[t] = in ? partDot(qr, kb + (j0 + t) * kv.sr, n.d, lane) : A(0);
      pd[t] = in ? partDot(gr, vb + (j0 + t) * vv.sr, n.d, lane) : A(0);
    }
    const int64_t jl = j0 + lane;
    const bool seen = jl < lim;
    const A s = transposeSum(ps, lane);
    A dp = transposeSum(pd, lane);
    const A p = seen ? dExp(s * scale - L) : A(0);
    if (drop.on && seen) dp *= drop.factor(static_cast<uint64_t>(row * n.s + jl));
    const A ds = seen ? p * (dp - D) * scale : A(0);
    const int64_t count = lim - j0 < kChunk ? lim - j0 : kChunk;
    for (int t = 0; t < count; ++t)
      addRow(dq, __shfl_sync(0xffffffffu, ds, t), kb + (j0 + t) * kv.sr, n.d, lane);
  }
  storeRow(gq + row * n.d, dq, A(1), n.d, lane);
}

// For key row j of kv head g: dv_j = sum_(h, i) P_ij f_ij dout_i and dk_j = scale * sum P_ij (dP_ij -
// dsum_i) q_i over the query heads h that share g and the rows i that see j (f: dropout factor).
// The query rows are taken 32 at a time, one per lane, as the keys are in the forward.
template <typename T, int R>
__global__ void gradKVKernel(T* __restrict__ gk, T* __restrict__ gv, const T* __restrict__ gout,
                             const T* __restrict__ q, HeadView qv, const T* __restrict__ k, HeadView kv,
                             const T* __restrict__ v, HeadView vv, const ComputeT<T>* __restrict__ lse,
                             const ComputeT<T>* __restrict__ dsum, Dims n, ComputeT<T> scale, bool causal,
                             Drop<ComputeT<T>> drop) {
  using A = ComputeT<T>;
  drop.resolve();
  const int lane = threadIdx.x % 32;
  const int64_t row = warpRow();  // (b Hkv + g) S + j
  if (row >= n.b * n.hkv * n.s) return;
  const int64_t j = row % n.s, bg = row / n.s, g = bg % n.hkv, b = bg / n.hkv, group = n.h / n.hkv;
  A kr[R], vr[R], dk[R], dv[R];
  loadRow(kr, k + b * kv.sb + g * kv.sh + j * kv.sr, n.d, lane);
  loadRow(vr, v + b * vv.sb + g * vv.sh + j * vv.sr, n.d, lane);
#pragma unroll
  for (int r = 0; r < R; ++r) dk[r] = dv[r] = A(0);
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const T* qh = q + b * qv.sb + h * qv.sh;
    const int64_t rows0 = (b * n.h + h) * n.t;  // the query rows of head h
    for (int64_t i0 = causal ? j : 0; i0 < n.t; i0 += kChunk) {
      A ps[kChunk], pd[kChunk];
#pragma unroll
      for (int t = 0; t < kChunk; ++t) {
        const bool in = i0 + t < n.t;
        ps[t] = in ? partDot(kr, qh + (i0 + t) * qv.sr, n.d, lane) : A(0);
        pd[t] = in ? partDot(vr, gout + (rows0 + i0 + t) * n.d, n.d, lane) : A(0);
      }
      const int64_t il = i0 + lane, qrow = rows0 + il;
      const bool seen = il < n.t;
      const A s = transposeSum(ps, lane), dp = transposeSum(pd, lane);
      const A p = seen ? dExp(s * scale - lse[qrow]) : A(0);
      const A f = drop.on && seen ? drop.factor(static_cast<uint64_t>(qrow * n.s + j)) : A(1);
      const A ds = seen ? p * (dp * f - dsum[qrow]) * scale : A(0);
      const A pf = p * f;
      const int64_t count = n.t - i0 < kChunk ? n.t - i0 : kChunk;
      for (int t = 0; t < count; ++t) {
        addRow(dv, __shfl_sync(0xffffffffu, pf, t), gout + (rows0 + i0 + t) * n.d, n.d, lane);
        addRow(dk, __shfl_sync(0xffffffffu, ds, t), qh + (i0 + t) * qv.sr, n.d, lane);
      }
    }
  }
  storeRow(gk + row * n.d, dk, A(1), n.d, lane);
  storeRow(gv + row * n.d, dv, A(1), n.d, lane);
}

Tensor lastDimContiguous(const Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); }
HeadView viewOf(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }
Dims dimsOf(const Tensor& q, const Tensor& k) {
  return {q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
}
unsigned blocksForRows(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

template <typename A>
Drop<A> dropOf(const AttentionParams& p) {
  return {p.dropout_p > 0.0, PhiloxState{p.seed, p.offset, p.philox_device},
          dropoutThreshold(1.0 - p.dropout_p),
          static_cast<A>(p.dropout_p >= 1.0 ? 0.0 : 1.0 / (1.0 - p.dropout_p))};
}

// Calls fn(std::integral_constant<int, R>) with the register count per lane for head dim d.
template <typename Fn>
void withRegs(int64_t d, Fn&& fn) {
  LOCKSTEP_ENFORCE(d <= kMaxAttentionHeadDim, NotSupportedError,
                   "scaled_dot_product_attention on a GPU takes head dims up to ", kMaxAttentionHeadDim,
                   ", got ", d, "; use more heads of a smaller dim, or run it on the CPU");
  if (d <= 64)
    fn(std::integral_constant<int, 2>{});
  else if (d <= 128)
    fn(std::integral_constant<int, 4>{});
  else
    fn(std::integral_constant<int, 8>{});
}

void checkDevices(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined()) checkSameDevice(op, **ts.begin(), *t);
}

}  // namespace

AttentionOutput attentionForward(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                 const AttentionParams& p) {
  checkDevices("scaled_dot_product_attention", {&q0, &k0, &v0});
  if (auto fused = fusedAttentionForward(q0, k0, v0, p)) return *std::move(fused);
  const Tensor q = lastDimContiguous(q0), k = lastDimContiguous(k0), v = lastDimContiguous(v0);
  const Dims n = dimsOf(q, k);
  AttentionOutput r{emptyOn({n.b, n.h, n.t, n.d}, q.dtype(), q),
                    emptyOn({n.b, n.h, n.t}, statsDType(q.dtype()), q)};
  const int64_t rows = n.b * n.h * n.t;
  if (rows == 0) return r;
  if (n.s == 0 || n.d == 0) {  // no keys: as the CPU, a zero output (and lse -inf) rather than 0/0
    r.out.zero();
    r.lse.fill(-std::numeric_limits<double>::infinity());
    return r;
  }
  withRegs(n.d, [&](auto regs) {
    constexpr int R = decltype(regs)::value;
    visitFloating("scaled_dot_product_attention", q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using A = ComputeT<T>;
      forwardKernel<T, R><<<blocksForRows(rows), 32 * kWarpsPerBlock, 0, streamOf(q)>>>(
          static_cast<T*>(r.out.devicePtr()), static_cast<A*>(r.lse.devicePtr()),
          static_cast<const T*>(q.devicePtr()), viewOf(q), static_cast<const T*>(k.devicePtr()), viewOf(k),
          static_cast<const T*>(v.devicePtr()), viewOf(v), n, static_cast<A>(p.scale), p.causal,
          dropOf<A>(p));
      LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    });
  });
  return r;
}

AttentionGrads attentionBackward(const Tensor& gout0, const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                 const Tensor& out0, const Tensor& lse0, const AttentionParams& p) {
  checkDevices("scaled_dot_product_attention backward", {&q0, &k0, &v0, &gout0, &out0, &lse0});
  if (auto fused = fusedAttentionBackward(gout0, q0, k0, v0, out0, lse0, p)) return *std::move(fused);
  const Tensor q = lastDimContiguous(q0), k = lastDimContiguous(k0), v = lastDimContiguous(v0);
  const DType st = statsDType(q.dtype());
  const Tensor gout = gout0.to(q.dtype()).contiguous(), out = out0.to(q.dtype()).contiguous(),
               lse = lse0.to(st).contiguous();
  const Dims n = dimsOf(q, k);
  AttentionGrads g{emptyOn(q.shape(), q.dtype(), q), emptyOn(k.shape(), k.dtype(), q),
                   emptyOn(v.shape(), v.dtype(), q)};
  const int64_t qrows = n.b * n.h * n.t, kvrows = n.b * n.hkv * n.s;
  if (n.d == 0 || qrows == 0 || kvrows == 0) {
    g.gq.zero();
    g.gk.zero();
    g.gv.zero();
    return g;
  }
  Tensor dsum = emptyOn({qrows}, st, q);
  cudaStream_t stream = streamOf(q);
  withRegs(n.d, [&](auto regs) {
    constexpr int R = decltype(regs)::value;
    visitFloating("scaled_dot_product_attention backward", q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using A = ComputeT<T>;
      const T *pq = static_cast<const T*>(q.devicePtr()), *pk = static_cast<const T*>(k.devicePtr()),
              *pv = static_cast<const T*>(v.devicePtr()), *pg = static_cast<const T*>(gout.devicePtr());
      const A* pl = static_cast<const A*>(lse.devicePtr());
      A* pd = static_cast<A*>(dsum.devicePtr());
      const A scale = static_cast<A>(p.scale);
      const Drop<A> drop = dropOf<A>(p);
      constexpr unsigned threads = 32 * kWarpsPerBlock;
      rowDotKernel<T><<<blocksForRows(qrows), threads, 0, stream>>>(
          pd, pg, static_cast<const T*>(out.devicePtr()), qrows, n.d);
      gradQKernel<T, R><<<blocksForRows(qrows), threads, 0, stream>>>(
          static_cast<T*>(g.gq.devicePtr()), pg, pq, viewOf(q), pk, viewOf(k), pv, viewOf(v), pl, pd, n,
          scale, p.causal, drop);
      gradKVKernel<T, R><<<blocksForRows(kvrows), threads, 0, stream>>>(
          static_cast<T*>(g.gk.devicePtr()), static_cast<T*>(g.gv.devicePtr()), pg, pq, viewOf(q), pk,
          viewOf(k), pv, viewOf(v), pl, pd, n, scale, p.causal, drop);
      LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    });
  });
  return g;
}

}  // namespace lockstep::kernels::cuda
