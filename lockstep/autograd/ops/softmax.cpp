// softmax, logSoftmax and dropout (declared in ops/linear.h).
#include "lockstep/kernels/softmax.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/linear.h"
#include "lockstep/kernels/dropout.h"

namespace lockstep::autograd {

namespace {
// Both backwards need only the output y and the dim.
template <bool kLog>
class SoftmaxBackward final : public Node {
 public:
  SoftmaxBackward(Tensor y, int64_t dim) : y_(std::move(y)), dim_(dim) {}
  std::vector<Tensor> apply(const Tensor& gy) override {
    return {kLog ? kernels::logSoftmaxBackward(gy, y_, dim_) : kernels::softmaxBackward(gy, y_, dim_)};
  }
  std::string name() const override { return kLog ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  void releaseSaved() override { y_ = Tensor(); }

 private:
  Tensor y_;
  int64_t dim_;
};

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

Variable softmax(const Variable& x0, int64_t dim) {
  const Variable x = autocast::fp32(x0);
  Tensor y = kernels::softmaxForward(x.tensor(), dim);
  return record<SoftmaxBackward<false>>(y, {&x}, y, dim);
}

Variable logSoftmax(const Variable& x0, int64_t dim) {
  const Variable x = autocast::fp32(x0);
  Tensor y = kernels::logSoftmaxForward(x.tensor(), dim);
  return record<SoftmaxBackward<true>>(y, {&x}, y, dim);
}

Variable dropout(const Variable& x, double p, bool training, Generator& gen) {
  LOCKSTEP_ENFORCE(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability must be in [0, 1], got ", p);
  // As in PyTorch: evaluation (or p == 0) passes the input through untouched, with no node.
  if (!training || p == 0.0) return x;
  auto [y, mask] = kernels::dropoutForward(x.tensor(), p, gen);
  return record<DropoutBackward>(y, {&x}, mask, p);
}

}  // namespace lockstep::autograd
