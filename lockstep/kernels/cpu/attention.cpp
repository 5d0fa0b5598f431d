// The cpu backend's scaled dot-product attention: blocked f32 loops over oneDNN's sgemm, with
// an online softmax (see kernels/dispatch.h).
#include "lockstep/kernels/attention.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "lockstep/kernels/cpu/vector_math.h"
#include "lockstep/kernels/dropout.h"
#include "lockstep/kernels/tables/attention.h"

namespace lockstep::kernels::cpu {

namespace {
// 64 x 64 blocks: a score block (16 KiB) and a head-dim 64 accumulator stay in L1/L2.
constexpr int64_t kBlockQ = 64, kBlockK = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  LOCKSTEP_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st), " for m=", m,
                 " n=", n, " k=", k);
}

// row[c] = exp(row[c] - sub) for c < lim, 0 for lim <= c < n; returns the sum.
LOCKSTEP_VECTOR_CLONES float expRow(float* __restrict row, int64_t lim, int64_t n, float sub) {
#pragma omp simd
  for (int64_t c = 0; c < lim; ++c) row[c] = expNonPositive(row[c] - sub);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < lim; ++c) sum += row[c];
  for (int64_t c = lim; c < n; ++c) row[c] = 0.0f;
  return sum;
}

LOCKSTEP_VECTOR_CLONES float rowMax(const float* __restrict row, int64_t n) {
  float mx = kNegInf;
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < n; ++c) mx = mx > row[c] ? mx : row[c];
  return mx;
}

// dS = P * (dP - D_i), in place in dp.
LOCKSTEP_VECTOR_CLONES void softmaxGrad(const float* __restrict pr, float* __restrict dp, int64_t n,
                                        float di) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) dp[c] = pr[c] * (dp[c] - di);
}

LOCKSTEP_VECTOR_CLONES void mulRow(float* __restrict a, const float* __restrict b, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) a[c] *= b[c];
}

// Dropout in the backward: pd = p * mask (what reached v), dp = dp * mask (the gradient of p).
LOCKSTEP_VECTOR_CLONES void maskRows(const float* __restrict pr, float* __restrict dp, float* __restrict pd,
                                     const float* __restrict mk, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    pd[c] = pr[c] * mk[c];
    dp[c] *= mk[c];
  }
}

LOCKSTEP_VECTOR_CLONES void scaleRow(float* __restrict a, int64_t n, float alpha) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) a[c] *= alpha;
}

// q/k/v with a contiguous last dim and a row stride of at least D are read in place.
Tensor rowsReadable(const Tensor& t) {
  return t.stride(3) == 1 && t.stride(2) >= t.size(3) && t.stride(2) >= 1 ? t : t.contiguous();
}

struct HeadMat {
  const float* base;
  int64_t sb, sh, st;
  explicit HeadMat(const Tensor& t)
      : base(t.data<float>()), sb(t.stride(0)), sh(t.stride(1)), st(t.stride(2)) {}
  const float* at(int64_t b, int64_t h) const { return base + b * sb + h * sh; }
};

// Columns of block row i (key block starting at j0, nc wide) that the causal mask leaves visible.
inline int64_t visibleCols(bool causal, int64_t i, int64_t j0, int64_t nc) {
  return causal ? std::clamp<int64_t>(i - j0 + 1, 0, nc) : nc;
}

AttentionOutput forwardFast(const Tensor& q0, const Tensor& k0, const Tensor& v0, const AttentionParams& p) {
  const Tensor q = rowsReadable(q0), k = rowsReadable(k0), v = rowsReadable(v0);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), S = k.size(2);
  // The output is written token-major, [B, T, H, D], and returned as its [B, H, T, D] view: merging
  // the heads back into [B, T, C] (transpose(1, 2), then reshape) is then a view, not a copy.
  Tensor out = Tensor::zeros({B, T, H, D}, DType::f32).transpose(1, 2);
  Tensor lse = Tensor::full({B, H, T}, kNegInf, DType::f32);
  if (B * H * T == 0 || S == 0 || D == 0) return {out, lse};
  const HeadMat Q(q), K(k), V(v), O(out);
  float* po = out.data<float>();
  float* pl = lse.data<float>();
  const int64_t group = H / Hkv, nqb = (T + kBlockQ - 1) / kBlockQ;
  const float scale = static_cast<float>(p.scale);
  const bool dropout = p.dropout_p > 0.0;
  const double keep = 1.0 - p.dropout_p;
  const float keep_scale = p.dropout_p >= 1.0 ? 0.0f : static_cast<float>(1.0 / keep);
  const uint64_t threshold = dropoutThreshold(keep);
#pragma omp parallel
  {
    std::vector<float> sb(kBlockQ * kBlockK), acc(kBlockQ * D), m(kBlockQ), l(kBlockQ), mk(kBlockK);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * H * nqb; ++task) {
      const int64_t bh = task / nqb, b = bh / H, h = bh % H, kvh = h / group;
      const int64_t i0 = (task % nqb) * kBlockQ, nr = std::min(kBlockQ, T - i0);
      const float* qb = Q.at(b, h) + i0 * Q.st;
      const float *kb = K.at(b, kvh), *vb = V.at(b, kvh);
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.0f);
      const int64_t jend = p.causal ? std::min(S, i0 + nr) : S;  // later key blocks are fully masked
      for (int64_t j0 = 0; j0 < jend; j0 += kBlockK) {
        const int64_t nc = std::min(kBlockK, jend - j0);
        gemm('N', 'T', nr, nc, D, scale, qb, Q.st, kb + j0 * K.st, K.st, 0.0f, sb.data(), kBlockK);
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t i = i0 + r, lim = visibleCols(p.causal, i, j0, nc);
          float* row = sb.data() + r * kBlockK;
          if (lim == 0) {
            std::fill(row, row + nc, 0.0f);
            continue;
          }
          const float mx = rowMax(row, lim);
          const float mnew = std::max(m[r], mx);
          const float alpha = m[r] == kNegInf ? 0.0f : expNonPositive(m[r] - mnew);
          l[r] = l[r] * alpha + expRow(row, lim, nc, mnew);
          m[r] = mnew;
          if (dropout) {
            // The softmax normaliser counts every weight; only the weights that reach v are dropped.
            const uint64_t base = p.offset + static_cast<uint64_t>(((b * H + h) * T + i) * S + j0);
            dropoutScales(base, lim, p.seed, threshold, keep_scale, mk.data());
            mulRow(row, mk.data(), lim);
          }
          if (alpha != 1.0f) scaleRow(acc.data() + r * D, D, alpha);
        }
        gemm('N', 'N', nr, D, nc, 1.0f, sb.data(), kBlockK, vb + j0 * V.st, V.st, 1.0f, acc.data(), D);
      }
      for (int64_t r = 0; r < nr; ++r) {
        const float inv = 1.0f / l[r];
        float* o = po + (O.at(b, h) - O.base) + (i0 + r) * O.st;
        const float* a = acc.data() + r * D;
#pragma omp simd
        for (int64_t c = 0; c < D; ++c) o[c] = a[c] * inv;
        pl[(b * H + h) * T + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
  return {out, lse};
}

AttentionGrads backwardFast(const Tensor& gout, const Tensor& q0, const Tensor& k0, const Tensor& v0,
                            const Tensor& out0, const Tensor& lse0, const AttentionParams& p) {
  const Tensor q = rowsReadable(q0), k = rowsReadable(k0), v = rowsReadable(v0);
  // dO and O are read in place in any layout with contiguous rows (the forward's token-major O, and
  // the gradient of the heads' merge, which is token-major too).
  const Tensor go = rowsReadable(gout), out = rowsReadable(out0), lse = lse0.contiguous();
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), S = k.size(2);
  // Token-major as the forward's output, so that the gradients flow back through the heads' split
  // (transpose, reshape) as views.
  auto tokenMajor = [&](int64_t heads, int64_t len) {
    return Tensor::zeros({B, len, heads, D}, DType::f32).transpose(1, 2);
  };
  AttentionGrads g{tokenMajor(H, T), tokenMajor(Hkv, S), tokenMajor(Hkv, S)};
  if (B * H * T == 0 || S == 0 || D == 0) return g;
  const HeadMat Q(q), K(k), V(v), GO(go), O(out), GQ(g.gq), GK(g.gk), GV(g.gv);
  const float* plse = lse.data<float>();
  float *pgq = g.gq.data<float>(), *pgk = g.gk.data<float>(), *pgv = g.gv.data<float>();
  const int64_t group = H / Hkv;
  const float scale = static_cast<float>(p.scale);
  const bool dropout = p.dropout_p > 0.0;
  const double keep = 1.0 - p.dropout_p;
  const float keep_scale = p.dropout_p >= 1.0 ? 0.0f : static_cast<float>(1.0 / keep);
  const uint64_t threshold = dropoutThreshold(keep);
  // One task per (batch, kv head): the query heads sharing a kv head add into the same dK, dV.
#pragma omp parallel
  {
    std::vector<float> pb(kBlockQ * kBlockK), dpb(kBlockQ * kBlockK), pdb(kBlockQ * kBlockK), dsum(T),
        mk(kBlockK);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * Hkv; ++task) {
      const int64_t b = task / Hkv, kvh = task % Hkv;
      const float *kb = K.at(b, kvh), *vb = V.at(b, kvh);
      float *dk = pgk + (GK.at(b, kvh) - GK.base), *dv = pgv + (GV.at(b, kvh) - GV.base);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t head = (b * H + h) * T;
        const float *qb = Q.at(b, h), *dout = GO.at(b, h), *o = O.at(b, h), *L = plse + head;
        float* dq = pgq + (GQ.at(b, h) - GQ.base);
        for (int64_t i = 0; i < T; ++i) {  // rowsum(dO * O) = sum_j P_ij dP_ij, also with dropout
          float s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t c = 0; c < D; ++c) s += dout[i * GO.st + c] * o[i * O.st + c];
          dsum[i] = s;
        }
        for (int64_t j0 = 0; j0 < S; j0 += kBlockK) {
          const int64_t nc = std::min(kBlockK, S - j0);
          const int64_t istart = p.causal ? (j0 / kBlockQ) * kBlockQ : 0;  // earlier queries see none
          for (int64_t i0 = istart; i0 < T; i0 += kBlockQ) {
            const int64_t nr = std::min(kBlockQ, T - i0);
            gemm('N', 'T', nr, nc, D, scale, qb + i0 * Q.st, Q.st, kb + j0 * K.st, K.st, 0.0f, pb.data(),
                 kBlockK);
            gemm('N', 'T', nr, nc, D, 1.0f, dout + i0 * GO.st, GO.st, vb + j0 * V.st, V.st, 0.0f, dpb.data(),
                 kBlockK);
            for (int64_t r = 0; r < nr; ++r) {
              const int64_t i = i0 + r, lim = visibleCols(p.causal, i, j0, nc);
              float *pr = pb.data() + r * kBlockK, *dp = dpb.data() + r * kBlockK;
              expRow(pr, lim, nc, L[i]);
              if (dropout) {
                float* pd = pdb.data() + r * kBlockK;
                const uint64_t base = p.offset + static_cast<uint64_t>((head + i) * S + j0);
                dropoutScales(base, lim, p.seed, threshold, keep_scale, mk.data());
                std::fill(mk.data() + lim, mk.data() + nc, 0.0f);
                maskRows(pr, dp, pd, mk.data(), nc);
              }
              softmaxGrad(pr, dp, nc, dsum[i]);  // dS, unscaled
            }
            gemm('T', 'N', nc, D, nr, 1.0f, dropout ? pdb.data() : pb.data(), kBlockK, dout + i0 * GO.st,
                 GO.st, 1.0f, dv + j0 * GV.st, GV.st);
            gemm('T', 'N', nc, D, nr, scale, dpb.data(), kBlockK, qb + i0 * Q.st, Q.st, 1.0f, dk + j0 * GK.st,
                 GK.st);
            gemm('N', 'N', nr, D, nc, scale, dpb.data(), kBlockK, kb + j0 * K.st, K.st, 1.0f, dq + i0 * GQ.st,
                 GQ.st);
          }
        }
      }
    }
  }
  return g;
}

}  // namespace

const AttentionKernels kAttention{.attentionForward = &forwardFast, .attentionBackward = &backwardFast};

}  // namespace lockstep::kernels::cpu
