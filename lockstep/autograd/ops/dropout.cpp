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
  auto [y, mask] = kernels::dropoutForward(x.tensor(), p, gen);
  return record<DropoutBackward>(y, {&x}, mask, p);
}

}  // namespace lockstep::autograd
