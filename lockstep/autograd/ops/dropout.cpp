// dropout: the kernel draws the mask, which the node keeps for backward.
#include "lockstep/autograd/ops/dropout.h"

#include "lockstep/autograd/function.h"
#include "lockstep/kernels/dropout.h"

namespace lockstep::autograd {

namespace {

class DropoutBackward final : public Node {
 public:
  DropoutBackward(Tensor mask, double p) : mask_(std::move(mask)), p_(p) {}
  std::vector<Tensor> apply(const Tensor& gy) override { return {kernels::dropoutBackward(gy, mask_, p_)}; }
  std::string name() const override { return "DropoutBackward"; }
  void releaseSaved() override { mask_ = Tensor(); }

 private:
  Tensor mask_;  // u8, 1 where the element was kept
  double p_;
};

}  // namespace

Variable dropout(const Variable& x, double p, bool training, Generator& gen) {
  LOCKSTEP_ENFORCE(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability must be in [0, 1], got ", p);
  // As in PyTorch: evaluation (or p == 0) passes the input through untouched, with no node.
  if (!training || p == 0.0) return x;
  const Generator::BatchShare share = gen.batchShare();
  if (share.replicas == 1 || x.dim() == 0 || x.numel() == 0) {
    auto [y, mask] = kernels::dropoutForward(x.tensor(), p, gen);
    return record<DropoutBackward>(y, {&x}, mask, p);
  }
  // A replica's share of a batch (Generator::BatchShare): sample j draws the counters of sample
  // j * replicas + replica of the one-process batch; the generator ends past the whole batch.
  LOCKSTEP_ENFORCE(!x.tensor().isCuda(), NotSupportedError,
                   "dropout: drawing a replica's share of one process's masks (pipeline replicas) runs on "
                   "the CPU only; ",
                   x.tensor().describe(), " is on the GPU");
  const Tensor xt = x.tensor();
  const int64_t batch = xt.size(0), per_sample = xt.numel() / batch;
  const uint64_t seed = gen.seed(), base = gen.offset();
  Tensor y = Tensor::empty(xt.shape(), xt.dtype()), mask = Tensor::empty(xt.shape(), DType::u8);
  for (int64_t j = 0; j < batch; ++j) {
    gen.setState(seed, base + static_cast<uint64_t>((j * share.replicas + share.replica) * per_sample));
    auto [yj, mj] = kernels::dropoutForward(xt.narrow(0, j, 1), p, gen);
    y.narrow(0, j, 1).copyFrom(yj);
    mask.narrow(0, j, 1).copyFrom(mj);
  }
  gen.setState(seed, base + static_cast<uint64_t>(batch * share.replicas * per_sample));
  return record<DropoutBackward>(y, {&x}, mask, p);
}

}  // namespace lockstep::autograd
