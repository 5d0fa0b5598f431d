#include "lockstep/kernels/attention.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/attention.h"

namespace lockstep::kernels {

namespace {

const Backends<AttentionKernels> kBackends{.cpu = &cpu::kAttention,
                                           .reference = &reference::kAttention,
                                           .cuda = LOCKSTEP_CUDA_TABLE(cuda::kAttention)};
const Backends<AttentionIntoKernels> kIntoBackends{.cuda = LOCKSTEP_CUDA_TABLE(cuda::kAttentionInto)};

void checkAttention(const Tensor& q, const Tensor& k, const Tensor& v) {
  LOCKSTEP_ENFORCE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, ValueError,
                   "scaled_dot_product_attention: q, k, v must be [B, H, T, D], got ", q.describe(), ", ",
                   k.describe(), ", ", v.describe());
  LOCKSTEP_ENFORCE(isFloating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), ValueError,
                   "scaled_dot_product_attention: q, k, v must share a floating dtype, got ", q.describe(),
                   ", ", k.describe(), ", ", v.describe());
  LOCKSTEP_ENFORCE(k.shape() == v.shape() && k.size(0) == q.size(0) && k.size(3) == q.size(3), ValueError,
                   "scaled_dot_product_attention: k and v must be [B, Hkv, S, D] with q's B and D, got q ",
                   shapeToString(q.shape()), ", k ", shapeToString(k.shape()), ", v ",
                   shapeToString(v.shape()));
  LOCKSTEP_ENFORCE(k.size(1) > 0 && q.size(1) % k.size(1) == 0, ValueError,
                   "scaled_dot_product_attention: query heads (", q.size(1),
                   ") must be a multiple of key/value heads (", k.size(1), ") for grouped-query attention");
}

}  // namespace

AttentionOutput attentionForward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionParams& p) {
  checkAttention(q, k, v);
  LOCKSTEP_ENFORCE(p.dropout_p >= 0.0 && p.dropout_p <= 1.0, ValueError,
                   "scaled_dot_product_attention: dropout_p must be in [0, 1], got ", p.dropout_p);
  return dispatch<&AttentionKernels::attentionForward>(kBackends, q, q, k, v, p);
}

AttentionGrads attentionBackward(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse, const AttentionParams& p) {
  checkAttention(q, k, v);
  LOCKSTEP_ENFORCE(gout.shape() == q.shape(), ValueError, "scaled_dot_product_attention backward: gradient ",
                   gout.describe(), " does not match the output's shape ", shapeToString(q.shape()));
  return dispatch<&AttentionKernels::attentionBackward>(kBackends, q, gout, q, k, v, out, lse, p);
}

void attentionBackwardInto(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, const AttentionParams& p,
                           const AttentionGrads& into) {
  checkAttention(q, k, v);
  LOCKSTEP_ENFORCE(
      into.gq.shape() == q.shape() && into.gk.shape() == k.shape() && into.gv.shape() == v.shape(),
      ValueError, "scaled_dot_product_attention backward: gradients ", into.gq.describe(), ", ",
      into.gk.describe(), ", ", into.gv.describe(), " do not match q, k, v ", q.describe(), ", ",
      k.describe(), ", ", v.describe());
  if (q.isCuda() && dispatchAsIs<&AttentionIntoKernels::attentionBackwardInto>(kIntoBackends, q, gout, q, k,
                                                                               v, out, lse, p, into))
    return;
  const AttentionGrads g = attentionBackward(gout, q, k, v, out, lse, p);
  Tensor(into.gq).copyFrom(g.gq);  // handle copies: the same storage
  Tensor(into.gk).copyFrom(g.gk);
  Tensor(into.gv).copyFrom(g.gv);
}

}  // namespace lockstep::kernels
