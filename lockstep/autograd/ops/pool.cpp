#include "lockstep/autograd/ops/pool.h"

#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/kernel_params.h"
#include "lockstep/kernels/pool.h"

namespace lockstep::autograd {

namespace {
class MaxPool2dBackward final : public Node {
 public:
  // With a workspace (oneDNN) the backward needs x's shape and layout only, so x itself is not
  // kept: its memory (often the largest activation of a CNN) is free as soon as the forward no
  // longer needs it, which keeps a training step's working set small.
  MaxPool2dBackward(const Tensor& x, Tensor workspace, kernels::Pool2dParams p)
      : x_(workspace.defined() ? Tensor() : x),
        shape_(x.shape()),
        strides_(x.strides()),
        dtype_(x.dtype()),
        workspace_(std::move(workspace)),
        p_(p) {}
  std::vector<Tensor> apply(const Tensor& gy) override {
    const Tensor x =
        x_.defined() ? x_ : Tensor::emptyStrided(shape_, strides_, dtype_, gy.device());  // never read
    return {kernels::maxPool2dBackward(gy, x, workspace_, p_)};
  }
  std::string name() const override { return "MaxPool2dBackward"; }
  void releaseSaved() override {
    x_ = Tensor();
    workspace_ = Tensor();
  }

 private:
  Tensor x_;
  Shape shape_, strides_;
  DType dtype_;
  Tensor workspace_;
  kernels::Pool2dParams p_;
};

class AvgPool2dBackward final : public Node {
 public:
  AvgPool2dBackward(Tensor x, kernels::Pool2dParams p) : x_(std::move(x)), p_(p) {}
  std::vector<Tensor> apply(const Tensor& gy) override { return {kernels::avgPool2dBackward(gy, x_, p_)}; }
  std::string name() const override { return "AvgPool2dBackward"; }
  void releaseSaved() override { x_ = Tensor(); }

 private:
  Tensor x_;  // for its shape and layout
  kernels::Pool2dParams p_;
};

class AdaptiveAvgPool2dBackward final : public Node {
 public:
  AdaptiveAvgPool2dBackward(Tensor x, std::array<int64_t, 2> out) : x_(std::move(x)), out_(out) {}
  std::vector<Tensor> apply(const Tensor& gy) override {
    return {kernels::adaptiveAvgPool2dBackward(gy, x_, out_)};
  }
  std::string name() const override { return "AdaptiveAvgPool2dBackward"; }
  void releaseSaved() override { x_ = Tensor(); }

 private:
  Tensor x_;
  std::array<int64_t, 2> out_;
};
}  // namespace

Variable maxPool2d(const Variable& x, const Pool2dOptions& opts) {
  const kernels::Pool2dParams p = poolParams(opts);
  // The workspace (argmax positions) is only kept when a backward pass will need it.
  auto r = kernels::maxPool2dForward(x.tensor(), p, needsGrad({&x}));
  return record<MaxPool2dBackward>(r.y, {&x}, x.tensor(), r.workspace, p);
}

Variable avgPool2d(const Variable& x, const Pool2dOptions& opts) {
  const kernels::Pool2dParams p = poolParams(opts);
  return record<AvgPool2dBackward>(kernels::avgPool2dForward(x.tensor(), p), {&x}, x.tensor(), p);
}

Variable adaptiveAvgPool2d(const Variable& x, std::array<int64_t, 2> output_size) {
  return record<AdaptiveAvgPool2dBackward>(kernels::adaptiveAvgPool2dForward(x.tensor(), output_size), {&x},
                                           x.tensor(), output_size);
}

}  // namespace lockstep::autograd
