// applyRotary (HF Llama's convention).
#include "lockstep/autograd/ops/rotary.h"

#include "lockstep/autograd/function.h"
#include "lockstep/kernels/transformer.h"

namespace lockstep::autograd {

namespace {

class RotaryBackward final : public Node {
 public:
  RotaryBackward(Tensor cos, Tensor sin) : cos_(std::move(cos)), sin_(std::move(sin)) {}
  std::vector<Tensor> apply(const Tensor& g) override { return {kernels::rotaryBackward(g, cos_, sin_)}; }
  std::string name() const override { return "RotaryBackward"; }
  void releaseSaved() override { cos_ = sin_ = Tensor(); }

 private:
  Tensor cos_, sin_;
};

}  // namespace

Variable applyRotary(const Variable& x, const Tensor& cos, const Tensor& sin) {
  LOCKSTEP_ENFORCE(cos.device() == x.tensor().device() && sin.device() == x.tensor().device(), ValueError,
                   "applyRotary: cos (", deviceName(cos.device()), ") and sin (", deviceName(sin.device()),
                   ") must be on x's device (", deviceName(x.tensor().device()),
                   "); rotaryTables makes them on the host: move them with .to()");
  Tensor y = kernels::rotaryForward(x.tensor(), cos, sin);
  return record<RotaryBackward>(y, {&x}, cos, sin);
}

}  // namespace lockstep::autograd
