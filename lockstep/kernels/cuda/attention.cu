// Scaled dot-product attention on a GPU (see attention.h): a warp per row; lane l holds elements
// l, l + 32, ... of a head-dim row in registers (R of them). Keys (in the backward of k and v, query
// rows) come 32 at a time: each lane sums its part of the 32 dot products and one transposed warp
// reduction leaves lane t with score t, so the softmax, its exponentials and the dropout draws of a
// chunk run once per lane in parallel (a score at a time took 5 shuffles, 2 exponentials and a
// Philox call on every lane per key), and the weights go back to the lanes' rows by shuffles.
#include <atomic>
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

// ---- Tiled kernels (f32, bf16, f16; head dims up to kTiledHeadDim) ----
//
// Blocked as FlashAttention-2 (Dao 2023) on CUDA cores: a block of kTileThreads takes kTile rows of
// one side (query rows of a head; key rows of a kv head in the backward of k and v) and walks the
// other side kTile rows at a time through shared memory. Every 64 x N product of a step is computed
// in registers, thread (ty, tx) owning rows 4 ty .. 4 ty + 3 and columns 4 tx + 32 m .. + 3, from
// operands stored "depth-major" (a[k][row], b[k][col]) so that each thread reads both with 16-byte
// loads; a head-dim row is padded with zeros to DP (32 or 64). The forward keeps the online softmax
// of the warp-per-row kernel (the output and the logsumexp); the backward recomputes the scores, once
// in the dq kernel (a block per query block) and once in the dk/dv kernel (a block per key block,
// over every query head that shares it): no atomics, deterministic. A thread's four neighbouring
// dropout counters (consecutive keys of a query row) share one Philox call.

constexpr int kTile = 64;
constexpr int kTileThreads = 128;
constexpr int kTiledHeadDim = 64;
constexpr int kLdT = kTile + 4;  // the row length of a depth-major tile (16-byte aligned rows)

template <int DP>
constexpr int ldNatural() {
  return DP + 4;
}

// acc[ii][4 m + cc] += sum_k a[k][4 ty + ii] * b[k][4 tx + 32 m + cc] over k < K.
template <int NM, int K>
__device__ __forceinline__ void tileProduct(float (&acc)[4][4 * NM], const float* __restrict__ a, int lda,
                                            const float* __restrict__ b, int ldb, int ty, int tx) {
#pragma unroll 8
  for (int k = 0; k < K; ++k) {
    const float4 av = *reinterpret_cast<const float4*>(a + k * lda + 4 * ty);
    const float ar[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
    for (int m = 0; m < NM; ++m) {
      const float4 bv = *reinterpret_cast<const float4*>(b + k * ldb + 4 * tx + 32 * m);
      const float br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
      for (int ii = 0; ii < 4; ++ii)
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) acc[ii][4 * m + cc] = fmaf(ar[ii], br[cc], acc[ii][4 * m + cc]);
    }
  }
}

template <int R, int C>
__device__ __forceinline__ void zeroTile(float (&t)[R][C]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) t[r][c] = 0.f;
}

// Rows row0 .. row0 + kTile - 1 of a [rows, d] matrix at src (row stride rs, contiguous last dim)
// into shared memory as f32, zero past `rows` and d: dst[r][c] (Natural) or dst[c][r].
template <int DP, bool Natural, typename T>
__device__ __forceinline__ void loadTile(float* __restrict__ dst, const T* __restrict__ src, int64_t rs,
                                         int64_t row0, int64_t rows, int64_t d) {
  for (int idx = threadIdx.x; idx < kTile * DP; idx += kTileThreads) {
    const int r = idx / DP, c = idx % DP;
    const int64_t gr = row0 + r;
    const float v = gr < rows && c < d ? castTo<float>(src[gr * rs + c]) : 0.f;
    if constexpr (Natural)
      dst[r * ldNatural<DP>() + c] = v;
    else
      dst[c * kLdT + r] = v;
  }
}

// The dropout factors of the four counters first .. first + 3 (one Philox call when first is a
// multiple of 4, as it is for rows of a multiple of 4 keys).
__device__ __forceinline__ void dropFactors4(float (&f)[4], const Drop<float>& drop, uint64_t first) {
  const uint64_t c = drop.philox.offset + first;
  const auto r0 = philox4x32(c >> 2, kDropoutStream, drop.philox.key);
  uint32_t w[4] = {r0[0], r0[1], r0[2], r0[3]};
  const unsigned shift = static_cast<unsigned>(c & 3);
  if (shift != 0) {
    const auto r1 = philox4x32((c >> 2) + 1, kDropoutStream, drop.philox.key);
    const uint32_t all[8] = {r0[0], r0[1], r0[2], r0[3], r1[0], r1[1], r1[2], r1[3]};
#pragma unroll
    for (int t = 0; t < 4; ++t) w[t] = all[shift + t];
  }
#pragma unroll
  for (int t = 0; t < 4; ++t) f[t] = w[t] < drop.threshold ? drop.keep_scale : 0.f;
}

// Max and sum over the 8 threads (tx) that share a row: lanes 8 (ty % 4) + tx of one warp.
__device__ __forceinline__ float rowGroupMax(float v) {
#pragma unroll
  for (int s = 1; s < 8; s *= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}
__device__ __forceinline__ float rowGroupSum(float v) {
#pragma unroll
  for (int s = 1; s < 8; s *= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
  return v;
}

// This block's query block: under a causal mask the last ones see the most keys, and blocks start in
// the order of their index (x, the head, fastest), so those run first and the short ones fill the tail.
__device__ __forceinline__ int64_t queryBlock(bool causal) {
  return causal ? int64_t(gridDim.y) - 1 - blockIdx.y : blockIdx.y;
}

// The column of element (m, cc) of a thread's patch.
__device__ __forceinline__ int patchCol(int tx, int m, int cc) { return 4 * tx + 32 * m + cc; }

// The keys query row i sees: none for rows past T.
__device__ __forceinline__ int64_t visibleKeys(int64_t i, const Dims& n, bool causal) {
  if (i >= n.t) return 0;
  return causal ? (i + 1 < n.s ? i + 1 : n.s) : n.s;
}

// The end of the keys that any row of the query block at i0 sees.
__device__ __forceinline__ int64_t keysEnd(int64_t i0, const Dims& n, bool causal) {
  const int64_t rows_end = i0 + kTile < n.t ? i0 + kTile : n.t;
  return causal ? (rows_end < n.s ? rows_end : n.s) : n.s;
}

// The dropout factors of a thread's 8 columns of one query row, whose first key's counter is first.
__device__ __forceinline__ void rowDropFactors(float (&f)[8], const Drop<float>& drop, uint64_t first,
                                               int tx) {
#pragma unroll
  for (int mm = 0; mm < 2; ++mm) {
    float f4[4];
    dropFactors4(f4, drop, first + patchCol(tx, mm, 0));
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) f[4 * mm + cc] = f4[cc];
  }
}

// Row ii of a thread's patch into a column-major [kTile][kLdT] buffer (buf[col][row]).
__device__ __forceinline__ void storePatchRow(float* __restrict__ buf, const float (&v)[8], int ty, int tx,
                                              int ii) {
#pragma unroll
  for (int c = 0; c < 8; ++c) buf[patchCol(tx, c / 4, c % 4) * kLdT + 4 * ty + ii] = v[c];
}

template <int DP>
constexpr size_t tiledForwardSmem() {
  return sizeof(float) * (2 * DP * kLdT + kTile * ldNatural<DP>() + kTile * kLdT);
}
template <int DP>
constexpr size_t tiledGradQSmem() {
  return sizeof(float) * (4 * DP * kLdT + kTile * ldNatural<DP>() + kTile * kLdT);
}
template <int DP>
constexpr size_t tiledGradKVSmem() {
  return sizeof(float) * (4 * DP * kLdT + 2 * kTile * ldNatural<DP>() + kTile * kLdT + 2 * kTile);
}

// Backward's two 4x8 patch products over depth-major blocks: s = x y^T (the scores) and
// dp = g w^T (the attention weights' gradient), both from zero. dq passes (q, k, dout, v); dk/dv
// passes them transposed, (k, q, v, dout).
template <int DP>
__device__ __forceinline__ void scoresAndWeightGrads(float (&s)[4][8], float (&dp)[4][8], const float* x,
                                                     const float* y, const float* g, const float* w, int ty,
                                                     int tx) {
  zeroTile(s);
  zeroTile(dp);
  tileProduct<2, DP>(s, x, kLdT, y, kLdT, ty, tx);
  tileProduct<2, DP>(dp, g, kLdT, w, kLdT, ty, tx);
}

// What a query-block kernel (forward, dq) starts from: its thread's place in the 8 x 16 grid of
// 4x8 patches, its (batch, head) and first query row, the K and V heads of its GQA group, and the q
// block loaded into shared memory depth-major (qt).
template <typename T>
struct QueryBlock {
  int ty, tx;
  int64_t bh, i0;
  const T* kb;
  const T* vb;
};
template <typename T, int DP>
__device__ QueryBlock<T> startQueryBlock(float* qt, const T* q, HeadView qv, const T* k, HeadView kv,
                                         const T* v, HeadView vv, Dims n, bool causal) {
  QueryBlock<T> qb;
  qb.ty = threadIdx.x >> 3;
  qb.tx = threadIdx.x & 7;
  qb.bh = blockIdx.x;
  const int64_t h = qb.bh % n.h, b = qb.bh / n.h, g = h / (n.h / n.hkv);
  qb.i0 = queryBlock(causal) * kTile;
  qb.kb = k + b * kv.sb + g * kv.sh;
  qb.vb = v + b * vv.sb + g * vv.sh;
  loadTile<DP, false>(qt, q + b * qv.sb + h * qv.sh, qv.sr, qb.i0, n.t, n.d);
  return qb;
}

// A query block's output patch (rows i0 + 4 ty + ii, its thread's columns), each row times
// rowScale[ii], into dst [B H, T, D].
template <typename T, int NO>
__device__ void storeQueryPatch(T* dst, const float (&acc)[4][4 * NO], const float (&rowScale)[4],
                                const QueryBlock<T>& qb, Dims n) {
#pragma unroll
  for (int ii = 0; ii < 4; ++ii) {
    const int64_t i = qb.i0 + 4 * qb.ty + ii;
    if (i >= n.t) continue;
#pragma unroll
    for (int c = 0; c < 4 * NO; ++c) {
      const int col = patchCol(qb.tx, c / 4, c % 4);
      if (col < n.d) dst[(qb.bh * n.t + i) * n.d + col] = castTo<T>(acc[ii][c] * rowScale[ii]);
    }
  }
}

// Grid (B H, query blocks).
template <typename T, int DP>
__global__ void __launch_bounds__(kTileThreads)
    tiledForwardKernel(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ q, HeadView qv,
                       const T* __restrict__ k, HeadView kv, const T* __restrict__ v, HeadView vv, Dims n,
                       float scale, bool causal, Drop<float> drop) {
  constexpr int NO = DP / 32;  // column groups of an output patch
  extern __shared__ float4 smem4[];
  float* qt = reinterpret_cast<float*>(smem4);  // [DP][kLdT]   q block, depth-major
  float* kt = qt + DP * kLdT;                   // [DP][kLdT]   k block, depth-major
  float* vs = kt + DP * kLdT;                   // [kTile][DP+4] v block
  float* pt = vs + kTile * ldNatural<DP>();     // [kTile][kLdT] weights, key-major
  drop.resolve();
  const QueryBlock<T> qb = startQueryBlock<T, DP>(qt, q, qv, k, kv, v, vv, n, causal);
  const auto [ty, tx, bh, i0, kb, vb] = qb;
  float o[4][4 * NO], m[4], l[4];
  int64_t lim[4];
  zeroTile(o);
#pragma unroll
  for (int ii = 0; ii < 4; ++ii) {
    m[ii] = -INFINITY;
    l[ii] = 0.f;
    lim[ii] = visibleKeys(i0 + 4 * ty + ii, n, causal);
  }
  const int64_t kend = keysEnd(i0, n, causal);
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();  // the previous step's readers of kt, vs and pt are done
    loadTile<DP, false>(kt, kb, kv.sr, j0, n.s, n.d);
    loadTile<DP, true>(vs, vb, vv.sr, j0, n.s, n.d);
    __syncthreads();
    float s[4][8];
    zeroTile(s);
    tileProduct<2, DP>(s, qt, kLdT, kt, kLdT, ty, tx);
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      float top = -INFINITY;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int64_t j = j0 + patchCol(tx, c / 4, c % 4);
        s[ii][c] = j < lim[ii] ? s[ii][c] * scale : -INFINITY;
        top = fmaxf(top, s[ii][c]);
      }
      top = rowGroupMax(top);
      const float mn = fmaxf(m[ii], top);
      const float corr = mn == -INFINITY ? 1.f : expf(m[ii] - mn);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        s[ii][c] = s[ii][c] == -INFINITY ? 0.f : expf(s[ii][c] - mn);
        sum += s[ii][c];
      }
      l[ii] = l[ii] * corr + rowGroupSum(sum);
      m[ii] = mn;
#pragma unroll
      for (int c = 0; c < 4 * NO; ++c) o[ii][c] *= corr;
      if (drop.on && lim[ii] > 0) {
        float f[8];
        rowDropFactors(f, drop, static_cast<uint64_t>(bh * n.t + i0 + 4 * ty + ii) * n.s + j0, tx);
#pragma unroll
        for (int c = 0; c < 8; ++c) s[ii][c] *= f[c];
      }
      storePatchRow(pt, s[ii], ty, tx, ii);
    }
    __syncthreads();
    tileProduct<NO, kTile>(o, pt, kLdT, vs, ldNatural<DP>(), ty, tx);
  }
  float inv[4];
#pragma unroll
  for (int ii = 0; ii < 4; ++ii) inv[ii] = 1.f / l[ii];
  storeQueryPatch<T, NO>(out, o, inv, qb, n);
#pragma unroll
  for (int ii = 0; ii < 4; ++ii) {
    const int64_t i = i0 + 4 * ty + ii;
    if (i < n.t && tx == 0) lse[bh * n.t + i] = m[ii] + logf(l[ii]);
  }
}

// dq, a block per query block: grid (B H, query blocks).
template <typename T, int DP>
__global__ void __launch_bounds__(kTileThreads)
    tiledGradQKernel(T* __restrict__ gq, const T* __restrict__ gout, const T* __restrict__ q, HeadView qv,
                     const T* __restrict__ k, HeadView kv, const T* __restrict__ v, HeadView vv,
                     const float* __restrict__ lse, const float* __restrict__ dsum, Dims n, float scale,
                     bool causal, Drop<float> drop) {
  constexpr int NO = DP / 32;
  extern __shared__ float4 smem4[];
  float* qt = reinterpret_cast<float*>(smem4);  // [DP][kLdT] q block, depth-major
  float* gt = qt + DP * kLdT;                   // [DP][kLdT] dout block, depth-major
  float* kt = gt + DP * kLdT;                   // [DP][kLdT] k block, depth-major
  float* vt = kt + DP * kLdT;                   // [DP][kLdT] v block, depth-major
  float* ks = vt + DP * kLdT;                   // [kTile][DP+4] k block
  float* st = ks + kTile * ldNatural<DP>();     // [kTile][kLdT] dS, key-major
  drop.resolve();
  const QueryBlock<T> qb = startQueryBlock<T, DP>(qt, q, qv, k, kv, v, vv, n, causal);
  const auto [ty, tx, bh, i0, kb, vb] = qb;
  loadTile<DP, false>(gt, gout + bh * n.t * n.d, n.d, i0, n.t, n.d);
  float dq[4][4 * NO], L[4], D[4];
  int64_t lim[4];
  zeroTile(dq);
#pragma unroll
  for (int ii = 0; ii < 4; ++ii) {
    const int64_t i = i0 + 4 * ty + ii;
    lim[ii] = visibleKeys(i, n, causal);
    L[ii] = i < n.t ? lse[bh * n.t + i] : 0.f;
    D[ii] = i < n.t ? dsum[bh * n.t + i] : 0.f;
  }
  const int64_t kend = keysEnd(i0, n, causal);
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();
    loadTile<DP, false>(kt, kb, kv.sr, j0, n.s, n.d);
    loadTile<DP, false>(vt, vb, vv.sr, j0, n.s, n.d);
    loadTile<DP, true>(ks, kb, kv.sr, j0, n.s, n.d);
    __syncthreads();
    float s[4][8], dp[4][8];
    scoresAndWeightGrads<DP>(s, dp, qt, kt, gt, vt, ty, tx);
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      float f[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) f[c] = 1.f;
      if (drop.on && lim[ii] > 0)
        rowDropFactors(f, drop, static_cast<uint64_t>(bh * n.t + i0 + 4 * ty + ii) * n.s + j0, tx);
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int jl = patchCol(tx, c / 4, c % 4);
        const float p = j0 + jl < lim[ii] ? expf(s[ii][c] * scale - L[ii]) : 0.f;
        st[jl * kLdT + 4 * ty + ii] = p * (dp[ii][c] * f[c] - D[ii]) * scale;
      }
    }
    __syncthreads();
    tileProduct<NO, kTile>(dq, st, kLdT, ks, ldNatural<DP>(), ty, tx);
  }
  const float one[4] = {1.f, 1.f, 1.f, 1.f};
  storeQueryPatch<T, NO>(gq, dq, one, qb, n);
}

// dk and dv, a block per key block of a kv head, over the query heads that share it: grid
// (B Hkv, key blocks). Rows are keys here, columns query rows.
template <typename T, int DP>
__global__ void __launch_bounds__(kTileThreads)
    tiledGradKVKernel(T* __restrict__ gk, T* __restrict__ gv, const T* __restrict__ gout,
                      const T* __restrict__ q, HeadView qv, const T* __restrict__ k, HeadView kv,
                      const T* __restrict__ v, HeadView vv, const float* __restrict__ lse,
                      const float* __restrict__ dsum, Dims n, float scale, bool causal, Drop<float> drop) {
  constexpr int NO = DP / 32;
  extern __shared__ float4 smem4[];
  float* kt = reinterpret_cast<float*>(smem4);  // [DP][kLdT] k block, depth-major
  float* vt = kt + DP * kLdT;                   // [DP][kLdT] v block, depth-major
  float* qt = vt + DP * kLdT;                   // [DP][kLdT] q block, depth-major
  float* gt = qt + DP * kLdT;                   // [DP][kLdT] dout block, depth-major
  float* qs = gt + DP * kLdT;                   // [kTile][DP+4] q block
  float* gs = qs + kTile * ldNatural<DP>();     // [kTile][DP+4] dout block
  float* ps = gs + kTile * ldNatural<DP>();     // [kTile][kLdT] P * dropout, then dS; query-major
  float* ls = ps + kTile * kLdT;                // [kTile] logsumexp of the query rows
  float* ds = ls + kTile;                       // [kTile] dsum of the query rows
  drop.resolve();
  const int ty = threadIdx.x >> 3, tx = threadIdx.x & 7;
  const int64_t bg = blockIdx.x, g = bg % n.hkv, b = bg / n.hkv, group = n.h / n.hkv;
  const int64_t j0 = int64_t(blockIdx.y) * kTile;  // under a causal mask the first key blocks see the most
  loadTile<DP, false>(kt, k + b * kv.sb + g * kv.sh, kv.sr, j0, n.s, n.d);
  loadTile<DP, false>(vt, v + b * vv.sb + g * vv.sh, vv.sr, j0, n.s, n.d);
  float dk[4][4 * NO], dv[4][4 * NO];
  zeroTile(dk);
  zeroTile(dv);
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const T* qh = q + b * qv.sb + h * qv.sh;
    const int64_t rows0 = (b * n.h + h) * n.t;  // the query rows of head h
    const T* gh = gout + rows0 * n.d;
    for (int64_t i0 = causal ? j0 : 0; i0 < n.t; i0 += kTile) {
      __syncthreads();
      loadTile<DP, false>(qt, qh, qv.sr, i0, n.t, n.d);
      loadTile<DP, false>(gt, gh, n.d, i0, n.t, n.d);
      loadTile<DP, true>(qs, qh, qv.sr, i0, n.t, n.d);
      loadTile<DP, true>(gs, gh, n.d, i0, n.t, n.d);
      if (threadIdx.x < kTile) {
        const int64_t i = i0 + threadIdx.x;
        ls[threadIdx.x] = i < n.t ? lse[rows0 + i] : 0.f;
        ds[threadIdx.x] = i < n.t ? dsum[rows0 + i] : 0.f;
      }
      __syncthreads();
      float s[4][8], dp[4][8];
      scoresAndWeightGrads<DP>(s, dp, kt, qt, vt, gt, ty, tx);
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int il = patchCol(tx, c / 4, c % 4);
        const int64_t i = i0 + il;
        float f[4] = {1.f, 1.f, 1.f, 1.f};
        if (drop.on && i < n.t) dropFactors4(f, drop, static_cast<uint64_t>(rows0 + i) * n.s + j0 + 4 * ty);
#pragma unroll
        for (int ii = 0; ii < 4; ++ii) {
          const int64_t j = j0 + 4 * ty + ii;
          const bool seen = j < visibleKeys(i, n, causal);
          const float p = seen ? expf(s[ii][c] * scale - ls[il]) : 0.f;
          ps[il * kLdT + 4 * ty + ii] = p * f[ii];
          s[ii][c] = p * (dp[ii][c] * f[ii] - ds[il]) * scale;  // dS, kept until ps is free
        }
      }
      __syncthreads();
      tileProduct<NO, kTile>(dv, ps, kLdT, gs, ldNatural<DP>(), ty, tx);
      __syncthreads();  // every reader of P is done: ps takes dS (one buffer: a third block per SM)
                        // Column by column: a column's 4 rows are adjacent in ps, one 16-byte store.
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int ii = 0; ii < 4; ++ii) ps[patchCol(tx, c / 4, c % 4) * kLdT + 4 * ty + ii] = s[ii][c];
      __syncthreads();
      tileProduct<NO, kTile>(dk, ps, kLdT, qs, ldNatural<DP>(), ty, tx);
    }
  }
#pragma unroll
  for (int ii = 0; ii < 4; ++ii) {
    const int64_t j = j0 + 4 * ty + ii;
    if (j >= n.s) continue;
    const int64_t row = bg * n.s + j;
#pragma unroll
    for (int c = 0; c < 4 * NO; ++c) {
      const int col = patchCol(tx, c / 4, c % 4);
      if (col < n.d) {
        gk[row * n.d + col] = castTo<T>(dk[ii][c]);
        gv[row * n.d + col] = castTo<T>(dv[ii][c]);
      }
    }
  }
}

// Whether the tiled kernels take this problem: f32/bf16/f16, head dim <= kTiledHeadDim, the row
// blocks within a grid's y dimension.
bool tiledApplies(const Tensor& q, const Dims& n) {
  return q.dtype() != DType::f64 && n.d <= kTiledHeadDim && (n.t + kTile - 1) / kTile <= 65535 &&
         (n.s + kTile - 1) / kTile <= 65535;
}

// Calls fn(std::integral_constant<int, DP>) with the padded head dim.
template <typename Fn>
void withTiledDim(int64_t d, Fn&& fn) {
  if (d <= 32)
    fn(std::integral_constant<int, 32>{});
  else
    fn(std::integral_constant<int, 64>{});
}

// Launches Kernel with `bytes` of dynamic shared memory, raising its limit over the default 48 KiB
// once per device.
template <auto Kernel, typename... Args>
void launchTiled(dim3 grid, size_t bytes, const Tensor& on, Args... args) {
  static std::atomic<uint64_t> raised{0};  // a bit per device ordinal
  const int device = on.device().index;
  const uint64_t bit = uint64_t(1) << (device & 63);
  if ((raised.load(std::memory_order_acquire) & bit) == 0) {
    LOCKSTEP_CUDA_CHECK(
        cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    raised.fetch_or(bit, std::memory_order_acq_rel);
  }
  Kernel<<<grid, kTileThreads, bytes, streamOf(on)>>>(args...);
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

unsigned tilesOf(int64_t rows) { return static_cast<unsigned>((rows + kTile - 1) / kTile); }

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
  if (tiledApplies(q, n)) {
    withTiledDim(n.d, [&](auto dim) {
      constexpr int DP = decltype(dim)::value;
      visitFloating("scaled_dot_product_attention", q.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (!std::is_same_v<T, double>) {
          launchTiled<tiledForwardKernel<T, DP>>(
              dim3(static_cast<unsigned>(n.b * n.h), tilesOf(n.t)), tiledForwardSmem<DP>(), q,
              static_cast<T*>(r.out.devicePtr()), static_cast<float*>(r.lse.devicePtr()),
              static_cast<const T*>(q.devicePtr()), viewOf(q), static_cast<const T*>(k.devicePtr()),
              viewOf(k), static_cast<const T*>(v.devicePtr()), viewOf(v), n, static_cast<float>(p.scale),
              p.causal, dropOf<float>(p));
        }
      });
    });
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
  if (tiledApplies(q, n)) {
    withTiledDim(n.d, [&](auto dim) {
      constexpr int DP = decltype(dim)::value;
      visitFloating("scaled_dot_product_attention backward", q.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (!std::is_same_v<T, double>) {
          const T *pq = static_cast<const T*>(q.devicePtr()), *pk = static_cast<const T*>(k.devicePtr()),
                  *pv = static_cast<const T*>(v.devicePtr()), *pg = static_cast<const T*>(gout.devicePtr());
          const float* pl = static_cast<const float*>(lse.devicePtr());
          float* pd = static_cast<float*>(dsum.devicePtr());
          const float scale = static_cast<float>(p.scale);
          const Drop<float> drop = dropOf<float>(p);
          rowDotKernel<T><<<blocksForRows(qrows), 32 * kWarpsPerBlock, 0, stream>>>(
              pd, pg, static_cast<const T*>(out.devicePtr()), qrows, n.d);
          LOCKSTEP_CUDA_CHECK(cudaGetLastError());
          launchTiled<tiledGradQKernel<T, DP>>(dim3(static_cast<unsigned>(n.b * n.h), tilesOf(n.t)),
                                               tiledGradQSmem<DP>(), q, static_cast<T*>(g.gq.devicePtr()), pg,
                                               pq, viewOf(q), pk, viewOf(k), pv, viewOf(v), pl, pd, n, scale,
                                               p.causal, drop);
          launchTiled<tiledGradKVKernel<T, DP>>(dim3(static_cast<unsigned>(n.b * n.hkv), tilesOf(n.s)),
                                                tiledGradKVSmem<DP>(), q, static_cast<T*>(g.gk.devicePtr()),
                                                static_cast<T*>(g.gv.devicePtr()), pg, pq, viewOf(q), pk,
                                                viewOf(k), pv, viewOf(v), pl, pd, n, scale, p.causal, drop);
        }
      });
    });
    return g;
  }
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
