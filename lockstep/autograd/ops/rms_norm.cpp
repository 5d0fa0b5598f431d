// rmsNorm: kernels::rmsNormForward/Backward with the reciprocal RMS saved in between.
#include "lockstep/autograd/ops/rms_norm.h"

#include <optional>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/transformer.h"

namespace lockstep::autograd {

namespace {

class RmsNormBackward final : public Node {
 public:
  RmsNormBackward(Tensor x, Tensor rstd, Tensor weight)
      : x_(std::move(x)), rstd_(std::move(rstd)), weight_(std::move(weight)) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    auto r = kernels::rmsNormBackward(g, x_, rstd_, weight_);
    return {edges_[0] ? r.gx : Tensor(), edges_[1] ? r.gweight : Tensor()};
  }
  // x's gradient added into the one its other readers left (a transformer's residual stream).
  std::vector<Tensor> applyInto(const Tensor& g, const std::vector<Tensor*>& into) override {
    if (Tensor* gx = held(into, 0); gx && edges_[0]) {
      if (auto r = kernels::rmsNormBackwardInto(*gx, g, x_, rstd_, weight_))
        return {Tensor(), edges_[1] ? r->gweight : Tensor()};
    }
    return apply(g);
  }
  bool accumulates() const override { return true; }
  std::string name() const override { return "RmsNormBackward"; }
  void releaseSaved() override { x_ = rstd_ = weight_ = Tensor(); }

 private:
  Tensor x_, rstd_, weight_;
};

Variable rmsNormTo(const Variable& x0, const Variable& weight0, double eps, std::optional<DType> y_dtype) {
  const Variable x = autocast::fp32(x0), weight = autocast::fp32(weight0);
  auto out = kernels::rmsNormForward(x.tensor(), weight.tensor(), eps, y_dtype);
  return record<RmsNormBackward>(out.y, {&x, &weight}, x.tensor(), out.rstd, weight.tensor());
}

}  // namespace

Variable rmsNorm(const Variable& x, const Variable& weight, double eps) {
  return rmsNormTo(x, weight, eps, std::nullopt);
}

Variable rmsNormLowered(const Variable& x, const Variable& weight, double eps) {
  const std::optional<DType> low = autocastDType();
  if (!low || x.dtype() == DType::f64) return autocast::lower(rmsNorm(x, weight, eps));
  return rmsNormTo(x, weight, eps, *low);
}

}  // namespace lockstep::autograd
