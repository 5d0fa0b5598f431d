// softmax and logSoftmax of ops/softmax.h.
#include "lockstep/autograd/ops/softmax.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/kernels/softmax.h"

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

}  // namespace lockstep::autograd
