// Attention by its definition, in double precision: the whole [T, S] score matrix of each head,
// softmax, a dropout mask drawn counter by counter (kernels::dropoutKeeps), and the textbook backward. The
// ground truth for the blocked kernel in attention.cpp (and the f64 path the gradient checks use).
#include "lockstep/kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "lockstep/kernels/dropout.h"
#include "lockstep/kernels/tables/attention.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::kernels::reference {

namespace {
Tensor asF64(const Tensor& t) { return t.to(DType::f64).contiguous(); }
DType statsDType(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

struct Dims {
  int64_t b, h, hkv, t, s, d;
};
Dims dimsOf(const Tensor& q, const Tensor& k) {
  return {q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
}

// The mask the blocked kernel must reproduce, drawn independently of it: all of [B, H, T, S] at once.
Tensor dropoutMask(const Dims& n, const AttentionParams& p) {
  Tensor mask = Tensor::empty({n.b, n.h, n.t, n.s}, DType::u8);
  if (p.dropout_p <= 0.0) {
    mask.fill(1);
    return mask;
  }
  uint8_t* m = mask.data<uint8_t>();
  for (int64_t i = 0; i < mask.numel(); ++i)
    m[i] = dropoutKeeps(p.offset + static_cast<uint64_t>(i), p.seed, 1.0 - p.dropout_p) ? 1 : 0;
  return mask;
}

// P (softmax of the masked scaled scores) of head (b, h): [T, S] row-major.
std::vector<double> probs(const Tensor& q, const Tensor& k, const Dims& n, const AttentionParams& p,
                          int64_t b, int64_t h, std::vector<double>* lse) {
  const int64_t kvh = h / (n.h / n.hkv);
  const double* pq = q.data<double>() + (b * n.h + h) * n.t * n.d;
  const double* pk = k.data<double>() + (b * n.hkv + kvh) * n.s * n.d;
  std::vector<double> s(static_cast<size_t>(n.t * n.s));
  for (int64_t i = 0; i < n.t; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n.s; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < n.d; ++c) acc += pq[i * n.d + c] * pk[j * n.d + c];
      const bool visible = !p.causal || j <= i;
      s[i * n.s + j] = visible ? acc * p.scale : -std::numeric_limits<double>::infinity();
      mx = std::max(mx, s[i * n.s + j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < n.s; ++j) sum += std::exp(s[i * n.s + j] - mx);
    const double l = mx + std::log(sum);
    if (lse) (*lse)[i] = l;
    for (int64_t j = 0; j < n.s; ++j) s[i * n.s + j] = std::exp(s[i * n.s + j] - l);
  }
  return s;
}
}  // namespace

AttentionOutput attentionForward(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                 const AttentionParams& p) {
  Tensor q = asF64(q0), k = asF64(k0), v = asF64(v0);
  const Dims n = dimsOf(q, k);
  Tensor out = Tensor::zeros({n.b, n.h, n.t, n.d}, DType::f64),
         lse = Tensor::empty({n.b, n.h, n.t}, DType::f64);
  Tensor mask = dropoutMask(n, p);
  const double keep_scale = p.dropout_p >= 1.0 ? 0.0 : 1.0 / (1.0 - p.dropout_p);
  for (int64_t b = 0; b < n.b; ++b) {
    for (int64_t h = 0; h < n.h; ++h) {
      std::vector<double> l(static_cast<size_t>(n.t));
      std::vector<double> pr = probs(q, k, n, p, b, h, &l);
      const int64_t kvh = h / (n.h / n.hkv);
      const double* pv = v.data<double>() + (b * n.hkv + kvh) * n.s * n.d;
      const uint8_t* pm = mask.data<uint8_t>() + (b * n.h + h) * n.t * n.s;
      double* po = out.data<double>() + (b * n.h + h) * n.t * n.d;
      for (int64_t i = 0; i < n.t; ++i) {
        lse.data<double>()[(b * n.h + h) * n.t + i] = l[i];
        for (int64_t j = 0; j < n.s; ++j) {
          const double w = pr[i * n.s + j] * (pm[i * n.s + j] ? keep_scale : 0.0);
          for (int64_t c = 0; c < n.d; ++c) po[i * n.d + c] += w * pv[j * n.d + c];
        }
      }
    }
  }
  return {out.to(q0.dtype()), lse.to(statsDType(q0.dtype()))};
}

AttentionGrads attentionBackward(const Tensor& gout, const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                 const Tensor& /*out*/, const Tensor& /*lse*/, const AttentionParams& p) {
  Tensor q = asF64(q0), k = asF64(k0), v = asF64(v0), go = asF64(gout);
  const Dims n = dimsOf(q, k);
  Tensor gq = Tensor::zeros(q.shape(), DType::f64), gk = Tensor::zeros(k.shape(), DType::f64);
  Tensor gv = Tensor::zeros(v.shape(), DType::f64);
  Tensor mask = dropoutMask(n, p);
  const double keep_scale = p.dropout_p >= 1.0 ? 0.0 : 1.0 / (1.0 - p.dropout_p);
  for (int64_t b = 0; b < n.b; ++b) {
    for (int64_t h = 0; h < n.h; ++h) {
      std::vector<double> pr = probs(q, k, n, p, b, h, nullptr);
      const int64_t kvh = h / (n.h / n.hkv);
      const int64_t qoff = (b * n.h + h) * n.t * n.d, kvoff = (b * n.hkv + kvh) * n.s * n.d;
      const double *pq = q.data<double>() + qoff, *pk = k.data<double>() + kvoff;
      const double *pv = v.data<double>() + kvoff, *pg = go.data<double>() + qoff;
      double *gqp = gq.data<double>() + qoff, *gkp = gk.data<double>() + kvoff,
             *gvp = gv.data<double>() + kvoff;
      const uint8_t* pm = mask.data<uint8_t>() + (b * n.h + h) * n.t * n.s;
      for (int64_t i = 0; i < n.t; ++i) {
        // dP_ij = (dout_i . v_j) * m_ij / (1 - p); dS_ij = P_ij (dP_ij - sum_l P_il dP_il).
        std::vector<double> dp(static_cast<size_t>(n.s));
        double dot = 0;
        for (int64_t j = 0; j < n.s; ++j) {
          const double m = pm[i * n.s + j] ? keep_scale : 0.0;
          double acc = 0;
          for (int64_t c = 0; c < n.d; ++c) acc += pg[i * n.d + c] * pv[j * n.d + c];
          dp[j] = acc * m;
          dot += pr[i * n.s + j] * dp[j];
          for (int64_t c = 0; c < n.d; ++c) gvp[j * n.d + c] += pr[i * n.s + j] * m * pg[i * n.d + c];
        }
        for (int64_t j = 0; j < n.s; ++j) {
          const double ds = pr[i * n.s + j] * (dp[j] - dot) * p.scale;
          for (int64_t c = 0; c < n.d; ++c) {
            gqp[i * n.d + c] += ds * pk[j * n.d + c];
            gkp[j * n.d + c] += ds * pq[i * n.d + c];
          }
        }
      }
    }
  }
  return {gq.to(q0.dtype()), gk.to(k0.dtype()), gv.to(v0.dtype())};
}

const AttentionKernels kAttention{LOCKSTEP_ATTENTION_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
