#include "lockstep/autograd/ops/conv.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/kernel_params.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/conv.h"

namespace lockstep::autograd {

namespace {
// Edges: x, weight, bias (bias's is null when there is none). Only the gradients whose edges exist
// are computed: the first layer's input needs no backward-data pass.
class Conv2dBackward final : public Node {
 public:
  Conv2dBackward(Tensor x, Tensor w, bool with_bias, kernels::Conv2dParams p, Tensor y)
      : x_(std::move(x)), w_(std::move(w)), with_bias_(with_bias), p_(p), y_(std::move(y)) {}

  std::vector<Tensor> apply(const Tensor& gy) override { return applyInto(gy, {}); }
  std::vector<Tensor> applyInto(const Tensor& gy, const std::vector<Tensor*>& into) override {
    // A fused relu is undone first: its gradient mask is the saved output's sign.
    Tensor g = p_.fuse_relu ? kernels::reluBackward(gy, y_) : gy;
    std::vector<Tensor> grads(3);
    Tensor* gx = held(into, 0);
    if (edges_[0] && !(gx && kernels::conv2dBackwardDataInto(*gx, g, x_, w_, p_)))
      grads[0] = kernels::conv2dBackwardData(g, x_, w_, p_);
    if (edges_[1] || edges_[2]) {
      auto wg = kernels::conv2dBackwardWeights(g, x_, w_.shape(), with_bias_ && edges_[2], p_);
      if (edges_[1]) grads[1] = std::move(wg.weight);
      if (edges_[2]) grads[2] = std::move(wg.bias);
    }
    return grads;
  }
  bool accumulates() const override { return true; }
  std::string name() const override { return "Conv2dBackward"; }
  void releaseSaved() override {
    x_ = Tensor();
    w_ = Tensor();
    y_ = Tensor();
  }

 private:
  Tensor x_, w_;
  bool with_bias_;
  kernels::Conv2dParams p_;
  Tensor y_;  // the output, saved only with fuse_relu
};
}  // namespace

Variable conv2d(const Variable& x0, const Variable& weight0, const Variable& bias0,
                const Conv2dOptions& opts) {
  const Variable x = autocast::lower(x0), weight = autocast::lower(weight0), bias = autocast::lower(bias0);
  const kernels::Conv2dParams p = convParams(opts);
  Tensor b = bias.defined() ? bias.tensor() : Tensor();
  kernels::checkConv2d(x.tensor(), weight.tensor(), b, p);  // before any reorder, with the caller's shapes
  Tensor xin = kernels::conv2dInput(x.tensor()), win = kernels::conv2dWeight(weight.tensor(), xin);
  Tensor y = kernels::conv2dForward(xin, win, b, p);
  return record<Conv2dBackward>(y, {&x, &weight, &bias}, xin, win, b.defined(), p,
                                opts.fuse_relu ? y : Tensor());
}

}  // namespace lockstep::autograd
