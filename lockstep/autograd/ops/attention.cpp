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

Variable scaledDotProductAttention(const Variable& q0, const Variable& k0, const Variable& v0,
                                   const AttentionOptions& opts, Generator& gen) {
  if (opts.dropout_p > 0.0 && gen.batchShare().replicas > 1 && q0.dim() == 4 && q0.size(0) > 0)
    return sharedBatchAttention(q0, k0, v0, opts, gen);
  // Autocast: attention runs in the lower-precision dtype, as torch's CPU autocast list has it.
  const Variable q = autocast::lower(q0), k = autocast::lower(k0), v = autocast::lower(v0);
  LOCKSTEP_ENFORCE(q.dim() == 4, ValueError, "scaled_dot_product_attention: q must be [B, H, T, D], got ",
                   q.tensor().describe());
  LOCKSTEP_ENFORCE(opts.dropout_p >= 0.0 && opts.dropout_p <= 1.0, ValueError,
                   "scaled_dot_product_attention: dropout_p must be in [0, 1], got ", opts.dropout_p);
  kernels::AttentionParams p;
  p.causal = opts.causal;
  p.dropout_p = opts.dropout_p;
  p.scale = opts.scale ? *opts.scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(q.size(3), 1)));
  if (p.dropout_p > 0.0) {
    const kernels::PhiloxState philox = kernels::philoxState(gen, q.tensor().device());
    p.seed = philox.key;
    p.offset = philox.offset;
    p.philox_device = philox.device;
  }
  // In a checkpointed segment: the first run keeps out and lse (B*H*T*(D+1) values, a small part of
  // the block's activations), and the recomputation takes them back instead of redoing the T x T
  // work; its inputs are bitwise the first run's, so the result is too.
  kernels::AttentionOutput r;
  CheckpointStash* stash = checkpointStash();
  const std::vector<Tensor>* kept = stash ? stash->take() : nullptr;
  if (kept) {
    LOCKSTEP_CHECK((*kept)[1].shape() == (Shape{q.size(0), q.size(1), q.size(2)}),
                   "checkpoint: the recomputation's attention calls differ from the first run's");
    r.out = (*kept)[0];
    r.lse = (*kept)[1];
  } else {
    r = kernels::attentionForward(q.tensor(), k.tensor(), v.tensor(), p);
    if (stash && !stash->replay) stash->saved.push_back({r.out, r.lse});
  }
  if (p.dropout_p > 0.0) {
    const uint64_t draws = static_cast<uint64_t>(q.size(0) * q.size(1) * q.size(2) * k.size(2));
    gen.setState(gen.seed(), gen.offset() + draws);
  }
  return record<AttentionBackward>(r.out, {&q, &k, &v}, q.tensor(), k.tensor(), v.tensor(), r.out, r.lse, p);
}

}  // namespace lockstep::autograd
