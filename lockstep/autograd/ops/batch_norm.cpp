#include "lockstep/autograd/ops/batch_norm.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/kernels/batch_norm.h"

namespace lockstep::autograd {

namespace {
// Edges: x, weight, bias. Saves the statistics the forward normalised with (batch or running).
class BatchNorm2dBackward final : public Node {
 public:
  BatchNorm2dBackward(Tensor x, Tensor w, bool with_bias, Tensor mean, Tensor var, kernels::BatchNormParams p)
      : x_(std::move(x)),
        w_(std::move(w)),
        with_bias_(with_bias),
        mean_(std::move(mean)),
        var_(std::move(var)),
        p_(p) {}

  std::vector<Tensor> apply(const Tensor& gy) override {
    auto g = kernels::batchNorm2dBackward(gy, x_, w_, with_bias_, mean_, var_, p_);
    return {edges_[0] ? g.x : Tensor(), edges_[1] ? g.weight : Tensor(), edges_[2] ? g.bias : Tensor()};
  }
  std::string name() const override { return "BatchNorm2dBackward"; }
  void releaseSaved() override { x_ = w_ = mean_ = var_ = Tensor(); }

 private:
  Tensor x_, w_;
  bool with_bias_;
  Tensor mean_, var_;
  kernels::BatchNormParams p_;
};
}  // namespace

Variable batchNorm2d(const Variable& x0, const Variable& weight0, const Variable& bias0, Tensor running_mean,
                     Tensor running_var, const BatchNormOptions& opts) {
  // Under autocast a GPU batch norm takes the 16-bit activation as it is, with f32 parameters and
  // statistics, and returns it in 16 bits (PyTorch's CUDA autocast lists batch_norm in neither
  // direction: cuDNN's batch norm is mixed-precision), so a bf16 ResNet moves no f32 activations; on
  // the CPU it runs in f32, as before.
  const Variable x = x0.tensor().isCuda() ? x0 : autocast::fp32(x0);
  const Variable weight = autocast::fp32(weight0), bias = autocast::fp32(bias0);
  const kernels::BatchNormParams p{opts.training, opts.momentum, opts.eps};
  Tensor w = weight.defined() ? weight.tensor() : Tensor(), b = bias.defined() ? bias.tensor() : Tensor();
  auto r = kernels::batchNorm2dForward(x.tensor(), w, b, std::move(running_mean), std::move(running_var), p);
  return record<BatchNorm2dBackward>(r.y, {&x, &weight, &bias}, x.tensor(), w, b.defined(), r.mean, r.var, p);
}

}  // namespace lockstep::autograd
