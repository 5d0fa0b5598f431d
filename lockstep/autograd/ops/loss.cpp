// crossEntropy, nllLoss and mseLoss of ops/loss.h.
#include "lockstep/autograd/ops/loss.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/linear.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/loss.h"

namespace lockstep::autograd {

namespace {
kernels::LossReduction toKernel(Reduction r) {
  switch (r) {
    case Reduction::none:
      return kernels::LossReduction::none;
    case Reduction::sum:
      return kernels::LossReduction::sum;
    case Reduction::mean:
      break;
  }
  return kernels::LossReduction::mean;
}

// The fused kernel's single backward: no log-softmax or NLL node in between.
class CrossEntropyBackward final : public Node {
 public:
  CrossEntropyBackward(Tensor logits, Tensor lse, Tensor target, kernels::CrossEntropyParams p)
      : logits_(std::move(logits)), lse_(std::move(lse)), target_(std::move(target)), p_(p) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    return {kernels::crossEntropyBackward(g, logits_, lse_, target_, p_)};
  }
  std::string name() const override { return "CrossEntropyBackward"; }
  void releaseSaved() override { logits_ = lse_ = target_ = Tensor(); }

 private:
  // The logits themselves (no copy) and [N] logsumexps: nothing of size [N, C] beyond the input.
  Tensor logits_, lse_, target_;
  kernels::CrossEntropyParams p_;
};

// The forward took the logits' gradient for dL/dloss = 1; the backward multiplies it into the
// GEMMs of x's and the weight's gradients and scales them by g.
class LinearCrossEntropyBackward final : public Node {
 public:
  LinearCrossEntropyBackward(kernels::LinearCrossEntropy forward, Tensor x, int64_t vocab)
      : forward_(std::move(forward)), x_(std::move(x)), vocab_(vocab) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    auto [dx, dw] = kernels::linearCrossEntropyBackward(g, forward_, x_, vocab_, edges_[0] != nullptr,
                                                        edges_[1] != nullptr);
    return {dx, dw};
  }
  std::string name() const override { return "LinearCrossEntropyBackward"; }
  void releaseSaved() override {
    forward_ = {};
    x_ = Tensor();
  }

 private:
  kernels::LinearCrossEntropy forward_;
  Tensor x_;
  int64_t vocab_;
};

class NllLossBackward final : public Node {
 public:
  NllLossBackward(Tensor target, int64_t classes, kernels::LossReduction r, int64_t ignore_index)
      : target_(std::move(target)), classes_(classes), r_(r), ignore_index_(ignore_index) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    return {kernels::nllLossBackward(g, target_, classes_, r_, ignore_index_)};
  }
  std::string name() const override { return "NllLossBackward"; }
  void releaseSaved() override { target_ = Tensor(); }

 private:
  Tensor target_;
  int64_t classes_;
  kernels::LossReduction r_;
  int64_t ignore_index_;
};

class MseLossBackward final : public Node {
 public:
  MseLossBackward(Tensor input, Tensor target, kernels::LossReduction r)
      : input_(std::move(input)), target_(std::move(target)), r_(r) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    std::vector<Tensor> out(2);
    // d/dtarget = -d/dinput: the same kernel with the operands swapped.
    if (edges_[0]) out[0] = kernels::mseLossBackward(g, input_, target_, r_);
    if (edges_[1]) out[1] = kernels::mseLossBackward(g, target_, input_, r_);
    return out;
  }
  std::string name() const override { return "MseLossBackward"; }
  void releaseSaved() override {
    input_ = Tensor();
    target_ = Tensor();
  }

 private:
  Tensor input_, target_;
  kernels::LossReduction r_;
};
}  // namespace

Variable crossEntropy(const Variable& logits0, const Tensor& target, const CrossEntropyOptions& opts) {
  kernels::CrossEntropyParams p{toKernel(opts.reduction), opts.label_smoothing, opts.ignore_index};
  // Autocast runs the loss in f32. Narrow logits are not cast for it: the kernels give the f32 loss
  // from them (f32_loss) and the gradient in their dtype, the values the cast would have given.
  p.f32_loss = autocastDType().has_value() && kernels::isLowPrecision(logits0.dtype());
  const Variable logits = p.f32_loss ? logits0 : autocast::fp32(logits0);
  auto [loss, lse] = kernels::crossEntropyForward(logits.tensor(), target, p);
  return record<CrossEntropyBackward>(loss, {&logits}, logits.tensor(), lse, target, p);
}

Variable linearCrossEntropy(const Variable& x0, const Variable& weight0, const Tensor& target,
                            const CrossEntropyOptions& opts) {
  const Variable x = autocast::lower(x0), weight = autocast::lower(weight0);
  // f16: the composed ops. The fused op makes the logits' gradient in forward, for dL/dloss = 1
  // (each entry p / rows at a mean), and multiplies by the loss's gradient only after the GEMMs; f16's
  // loss scaling puts its scale in that gradient, so most of a large vocabulary's entries would round
  // to zero in f16 before the scale reached them. The composed backward scales first.
  if (x.dtype() == DType::f16) {
    LOCKSTEP_ENFORCE(opts.reduction != Reduction::none, ValueError,
                     "linear_cross_entropy: reduction none is not supported; take cross entropy of the "
                     "linear layer's logits for per-row losses");
    return crossEntropy(linear(x, weight, Variable()), target, opts);
  }
  kernels::CrossEntropyParams p{toKernel(opts.reduction), opts.label_smoothing, opts.ignore_index};
  p.f32_loss = autocastDType().has_value() && kernels::isLowPrecision(x.dtype());
  const bool grad = needsGrad({&x, &weight});
  kernels::LinearCrossEntropy forward =
      kernels::linearCrossEntropyForward(x.tensor(), weight.tensor(), target, p, grad);
  Tensor loss = std::move(forward.loss);
  if (!grad) return Variable::makeResult(loss, nullptr);
  return record<LinearCrossEntropyBackward>(loss, {&x, &weight}, std::move(forward), x.tensor(),
                                            weight.size(0));
}

Variable nllLoss(const Variable& log_probs0, const Tensor& target, Reduction reduction,
                 int64_t ignore_index) {
  const Variable log_probs = autocast::fp32(log_probs0);
  auto r = toKernel(reduction);
  Tensor loss = kernels::nllLossForward(log_probs.tensor(), target, r, ignore_index);
  return record<NllLossBackward>(loss, {&log_probs}, target, log_probs.size(1), r, ignore_index);
}

Variable mseLoss(const Variable& input0, const Variable& target0, Reduction reduction) {
  const Variable input = autocast::fp32(input0), target = autocast::fp32(target0);
  auto r = toKernel(reduction);
  Tensor loss = kernels::mseLossForward(input.tensor(), target.tensor(), r);
  return record<MseLossBackward>(loss, {&input, &target}, input.tensor(), target.tensor(), r);
}

}  // namespace lockstep::autograd
