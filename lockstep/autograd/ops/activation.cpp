#include "lockstep/autograd/ops/activation.h"

#include "lockstep/autograd/function.h"
#include "lockstep/kernels/activation.h"

namespace lockstep::autograd {

namespace {
class ReluBackward final : public Node {
 public:
  explicit ReluBackward(Tensor y) : y_(std::move(y)) {}
  std::vector<Tensor> apply(const Tensor& gy) override { return {kernels::reluBackward(gy, y_)}; }
  std::string name() const override { return "ReluBackward"; }
  void releaseSaved() override { y_ = Tensor(); }

 private:
  Tensor y_;
};
}  // namespace

Variable relu(const Variable& x) {
  Tensor y = kernels::reluForward(x.tensor());
  return record<ReluBackward>(y, {&x}, y);
}

}  // namespace lockstep::autograd
