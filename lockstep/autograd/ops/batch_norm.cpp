#include "lockstep/autograd/ops/batch_norm.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/activation.h"
#include "lockstep/autograd/ops/arith.h"
#include "lockstep/kernels/batch_norm.h"

namespace lockstep::autograd {

namespace {
// Edges: x, weight, bias, residual. Saves the statistics the forward normalised with (batch or
// running), and its output where a fused relu's mask comes from.
class BatchNorm2dBackward final : public Node {
 public:
  BatchNorm2dBackward(Tensor x, Tensor w, bool with_bias, Tensor mean, Tensor var, kernels::BatchNormParams p,
                      Tensor y)
      : x_(std::move(x)),
        w_(std::move(w)),
        with_bias_(with_bias),
        mean_(std::move(mean)),
        var_(std::move(var)),
        p_(p),
        y_(std::move(y)) {}

  std::vector<Tensor> apply(const Tensor& gy) override {
    auto g = kernels::batchNorm2dBackward(gy, x_, w_, with_bias_, mean_, var_, p_, y_, edges_[3] != nullptr);
    return {edges_[0] ? g.x : Tensor(), edges_[1] ? g.weight : Tensor(), edges_[2] ? g.bias : Tensor(),
            edges_[3] ? g.residual : Tensor()};
  }
  std::string name() const override { return "BatchNorm2dBackward"; }
  void releaseSaved() override { x_ = w_ = mean_ = var_ = y_ = Tensor(); }

 private:
  Tensor x_, w_;
  bool with_bias_;
  Tensor mean_, var_;
  kernels::BatchNormParams p_;
  Tensor y_;  // the output, saved only with a fused relu
};

// The input as the kernels get it. Under autocast a GPU batch norm takes the 16-bit activation as it
// is, with f32 parameters and statistics, and returns it in 16 bits (PyTorch's CUDA autocast lists
// batch_norm in neither direction: cuDNN's batch norm is mixed-precision), so a bf16 ResNet moves no
// f32 activations; on the CPU it runs in f32.
Variable normInput(const Variable& x0) { return x0.tensor().isCuda() ? x0 : autocast::fp32(x0); }

// x from normInput.
Variable normalise(const Variable& x, const Variable& weight0, const Variable& bias0, Tensor running_mean,
                   Tensor running_var, const BatchNormOptions& opts, const Variable& residual, bool relu) {
  const Variable weight = autocast::fp32(weight0), bias = autocast::fp32(bias0);
  kernels::BatchNormParams p{opts.training, opts.momentum, opts.eps};
  p.relu = relu;
  Tensor w = weight.defined() ? weight.tensor() : Tensor(), b = bias.defined() ? bias.tensor() : Tensor();
  auto r = kernels::batchNorm2dForward(x.tensor(), w, b, std::move(running_mean), std::move(running_var), p,
                                       residual.defined() ? residual.tensor() : Tensor());
  return record<BatchNorm2dBackward>(r.y, {&x, &weight, &bias, &residual}, x.tensor(), w, b.defined(), r.mean,
                                     r.var, p, relu ? r.y : Tensor());
}
}  // namespace

Variable batchNorm2d(const Variable& x, const Variable& weight, const Variable& bias, Tensor running_mean,
                     Tensor running_var, const BatchNormOptions& opts) {
  return normalise(normInput(x), weight, bias, std::move(running_mean), std::move(running_var), opts,
                   Variable(), false);
}

Variable batchNorm2dRelu(const Variable& x, const Variable& weight, const Variable& bias, Tensor running_mean,
                         Tensor running_var, const BatchNormOptions& opts, const Variable& residual) {
  // One pass where the residual is what the kernels add as it is: x's shape and dtype, on its device
  // (under CPU autocast the normalised x is f32 while the residual may be 16-bit).
  const Variable xin = normInput(x);
  const bool fusable =
      !residual.defined() || (residual.shape() == xin.shape() && residual.dtype() == xin.dtype() &&
                              residual.tensor().device() == xin.tensor().device());
  if (!fusable) {
    return relu(add(normalise(xin, weight, bias, std::move(running_mean), std::move(running_var), opts,
                              Variable(), false),
                    residual));
  }
  return normalise(xin, weight, bias, std::move(running_mean), std::move(running_var), opts, residual, true);
}

}  // namespace lockstep::autograd
