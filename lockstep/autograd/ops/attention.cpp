// scaledDotProductAttention of ops/attention.h: one node around the blocked kernel, saving only
// q, k, v (the inputs, no copies), the output and the [B, H, T] logsumexp.
#include "lockstep/autograd/ops/attention.h"

#include <cmath>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/checkpoint.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/shape.h"
#include "lockstep/kernels/attention.h"
#include "lockstep/kernels/dropout.h"
#include "lockstep/kernels/fusions.h"

namespace lockstep::autograd {

namespace {
class AttentionBackward final : public Node {
 public:
  AttentionBackward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, kernels::AttentionParams p)
      : q_(std::move(q)),
        k_(std::move(k)),
        v_(std::move(v)),
        out_(std::move(out)),
        lse_(std::move(lse)),
        p_(p) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    auto r = kernels::attentionBackward(g, q_, k_, v_, out_, lse_, p_);
    return {edges_[0] ? r.gq : Tensor(), edges_[1] ? r.gk : Tensor(), edges_[2] ? r.gv : Tensor()};
  }
  std::string name() const override { return "ScaledDotProductAttentionBackward"; }
  void releaseSaved() override { q_ = k_ = v_ = out_ = lse_ = Tensor(); }

 private:
  Tensor q_, k_, v_, out_, lse_;
  kernels::AttentionParams p_;
};
}  // namespace

namespace {
// A replica's share of the batch (Generator::BatchShare) with dropout: one call per sample, each
// drawing the counters of its sample in the one-process batch; the generator ends past the whole
// batch's draws.
Variable sharedBatchAttention(const Variable& q, const Variable& k, const Variable& v,
                              const AttentionOptions& opts, Generator& gen) {
  const Generator::BatchShare share = gen.batchShare();
  LOCKSTEP_ENFORCE(!q.tensor().isCuda(), NotSupportedError,
                   "scaled_dot_product_attention: drawing a replica's share of one process's dropout "
                   "(pipeline replicas) runs on the CPU only; q is on the GPU");
  const int64_t batch = q.size(0);
  const auto per_sample = static_cast<uint64_t>(q.size(1) * q.size(2) * k.size(2));
  const uint64_t seed = gen.seed(), base = gen.offset();
  std::vector<Variable> outs;
  const BatchShareScope plain(gen, {});  // each call below draws its one sample's counters plainly
  for (int64_t b = 0; b < batch; ++b) {
    gen.setState(seed, base + static_cast<uint64_t>(b * share.replicas + share.replica) * per_sample);
    outs.push_back(
        scaledDotProductAttention(narrow(q, 0, b, 1), narrow(k, 0, b, 1), narrow(v, 0, b, 1), opts, gen));
  }
  gen.setState(seed, base + static_cast<uint64_t>(batch * share.replicas) * per_sample);
  return batch == 1 ? outs.front() : concat(outs, 0);
}
}  // namespace

namespace {
struct Attended {
  kernels::AttentionOutput r;
  kernels::AttentionParams p;
};

// The forward of q, k, v (autocast's dtype already): its parameters, the kernel's result (or a
// checkpoint's kept one), the generator moved past the dropout draws.
Attended attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts,
                Generator& gen) {
  LOCKSTEP_ENFORCE(q.dim() == 4, ValueError, "scaled_dot_product_attention: q must be [B, H, T, D], got ",
                   q.describe());
  LOCKSTEP_ENFORCE(opts.dropout_p >= 0.0 && opts.dropout_p <= 1.0, ValueError,
                   "scaled_dot_product_attention: dropout_p must be in [0, 1], got ", opts.dropout_p);
  Attended a;
  kernels::AttentionParams& p = a.p;
  p.causal = opts.causal;
  p.dropout_p = opts.dropout_p;
  p.scale = opts.scale ? *opts.scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(q.size(3), 1)));
  if (p.dropout_p > 0.0) {
    const kernels::PhiloxState philox = kernels::philoxState(gen, q.device());
    p.seed = philox.key;
    p.offset = philox.offset;
    p.philox_device = philox.device;
  }
  // In a checkpointed segment: the first run keeps out and lse (B*H*T*(D+1) values, a small part of
  // the block's activations), and the recomputation takes them back instead of redoing the T x T
  // work; its inputs are bitwise the first run's, so the result is too.
  CheckpointStash* stash = checkpointStash();
  const std::vector<Tensor>* kept = stash ? stash->take() : nullptr;
  if (kept) {
    LOCKSTEP_CHECK((*kept)[1].shape() == (Shape{q.size(0), q.size(1), q.size(2)}),
                   "checkpoint: the recomputation's attention calls differ from the first run's");
    a.r.out = (*kept)[0];
    a.r.lse = (*kept)[1];
  } else {
    a.r = kernels::attentionForward(q, k, v, p);
    if (stash && !stash->replay) stash->saved.push_back({a.r.out, a.r.lse});
  }
  if (p.dropout_p > 0.0) {
    const uint64_t draws = static_cast<uint64_t>(q.size(0) * q.size(1) * q.size(2) * k.size(2));
    gen.setState(gen.seed(), gen.offset() + draws);
  }
  return a;
}

// Part `part` (0 q, 1 k, 2 v) of a contiguous packed [B, T, 3 * H * D] projection as [B, H, T, D]
// heads: a view (row stride 3 * H * D, head stride D).
Tensor packedHeads(const Tensor& qkv, int64_t heads, int64_t part) {
  const int64_t b = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / (3 * heads);
  return qkv.view({b, t, 3, heads, d}).narrow(2, part, 1).squeeze(2).transpose(1, 2);
}

// packedQkvAttention's one node: the three heads' gradients written into one [B, T, 3 * H * D]
// gradient (by cuDNN in place on a GPU; elsewhere computed, then copied into its thirds).
class PackedAttentionBackward final : public Node {
 public:
  PackedAttentionBackward(Tensor qkv, int64_t heads, Tensor out, Tensor lse, kernels::AttentionParams p)
      : qkv_(std::move(qkv)), heads_(heads), out_(std::move(out)), lse_(std::move(lse)), p_(p) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    const int64_t b = qkv_.size(0), t = qkv_.size(1), c = qkv_.size(2) / 3;
    const Tensor gout = g.reshape({b, t, heads_, c / heads_}).transpose(1, 2);
    Tensor gqkv = Tensor::empty(qkv_.shape(), qkv_.dtype(), MemoryFormat::contiguous, qkv_.device());
    kernels::attentionBackwardInto(
        gout, packedHeads(qkv_, heads_, 0), packedHeads(qkv_, heads_, 1), packedHeads(qkv_, heads_, 2), out_,
        lse_, p_, {packedHeads(gqkv, heads_, 0), packedHeads(gqkv, heads_, 1), packedHeads(gqkv, heads_, 2)});
    return {gqkv};
  }
  std::string name() const override { return "PackedQkvAttentionBackward"; }
  void releaseSaved() override { qkv_ = out_ = lse_ = Tensor(); }

 private:
  Tensor qkv_;
  int64_t heads_;
  Tensor out_, lse_;
  kernels::AttentionParams p_;
};
}  // namespace

Variable scaledDotProductAttention(const Variable& q0, const Variable& k0, const Variable& v0,
                                   const AttentionOptions& opts, Generator& gen) {
  if (opts.dropout_p > 0.0 && gen.batchShare().replicas > 1 && q0.dim() == 4 && q0.size(0) > 0)
    return sharedBatchAttention(q0, k0, v0, opts, gen);
  // Autocast: attention runs in the lower-precision dtype, as torch's CPU autocast list has it.
  const Variable q = autocast::lower(q0), k = autocast::lower(k0), v = autocast::lower(v0);
  const Attended a = attend(q.tensor(), k.tensor(), v.tensor(), opts, gen);
  return record<AttentionBackward>(a.r.out, {&q, &k, &v}, q.tensor(), k.tensor(), v.tensor(), a.r.out,
                                   a.r.lse, a.p);
}

Variable packedQkvAttention(const Variable& qkv0, int64_t heads, const AttentionOptions& opts,
                            Generator& gen) {
  LOCKSTEP_ENFORCE(qkv0.dim() == 3 && heads > 0 && qkv0.size(2) % (3 * heads) == 0, ValueError,
                   "attention of a packed q, k, v projection: qkv must be [B, T, 3 * H * D] with H = ", heads,
                   " heads, got ", qkv0.tensor().describe());
  const int64_t b = qkv0.size(0), t = qkv0.size(1), c = qkv0.size(2) / 3;
  if ((opts.dropout_p > 0.0 && gen.batchShare().replicas > 1) ||
      !kernels::fusionEnabled(kernels::Fusion::packed_qkv_attention)) {
    // A replica's share of the batch draws its dropout sample by sample (or the fusion is off:
    // LOCKSTEP_DISABLE_FUSIONS): the composed ops.
    const std::vector<Variable> parts = split(qkv0, c, 2);
    auto split_heads = [&](const Variable& x) {
      return transpose(reshape(x, {b, t, heads, c / heads}), 1, 2);
    };
    const Variable y = scaledDotProductAttention(split_heads(parts[0]), split_heads(parts[1]),
                                                 split_heads(parts[2]), opts, gen);
    return reshape(transpose(y, 1, 2), {b, t, c});
  }
  const Variable qkv = autocast::lower(qkv0);
  const Tensor x = qkv.tensor().contiguous();
  const Attended a =
      attend(packedHeads(x, heads, 0), packedHeads(x, heads, 1), packedHeads(x, heads, 2), opts, gen);
  // The heads merged: a view of a token-major out (the CPU's and cuDNN's), else a copy.
  const Tensor y = a.r.out.transpose(1, 2).reshape({b, t, c});
  return record<PackedAttentionBackward>(y, {&qkv}, x, heads, a.r.out, a.r.lse, a.p);
}

}  // namespace lockstep::autograd
