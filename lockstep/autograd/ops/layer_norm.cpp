// layerNorm of ops/layer_norm.h: kernels::layerNormForward/Backward with the statistics saved in between.
#include "lockstep/autograd/ops/layer_norm.h"

#include <optional>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/layer_norm.h"

namespace lockstep::autograd {

namespace {

class LayerNormBackward final : public Node {
 public:
  LayerNormBackward(Tensor x, Tensor mean, Tensor variance, Shape normalized_shape, Tensor weight,
                    Tensor bias, double eps)
      : x_(std::move(x)),
        mean_(std::move(mean)),
        variance_(std::move(variance)),
        normalized_shape_(std::move(normalized_shape)),
        weight_(std::move(weight)),
        bias_(std::move(bias)),
        eps_(eps) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    auto r = kernels::layerNormBackward(g, x_, mean_, variance_, normalized_shape_, weight_, bias_, eps_);
    return {edges_[0] ? r.gx : Tensor(), edges_[1] ? r.gweight : Tensor(), edges_[2] ? r.gbias : Tensor()};
  }
  // x's gradient added into the one its other readers left (a transformer's residual stream).
  std::vector<Tensor> applyInto(const Tensor& g, const std::vector<Tensor*>& into) override {
    if (Tensor* gx = held(into, 0); gx && edges_[0]) {
      if (auto r = kernels::layerNormBackwardInto(*gx, g, x_, mean_, variance_, normalized_shape_, weight_,
                                                  bias_, eps_)) {
        return {Tensor(), edges_[1] ? r->gweight : Tensor(), edges_[2] ? r->gbias : Tensor()};
      }
    }
    return apply(g);
  }
  bool accumulates() const override { return true; }
  std::string name() const override { return "LayerNormBackward"; }
  void releaseSaved() override { x_ = mean_ = variance_ = weight_ = bias_ = Tensor(); }

 private:
  Tensor x_, mean_, variance_;
  Shape normalized_shape_;
  Tensor weight_, bias_;
  double eps_;
};

Variable layerNormTo(const Variable& x0, const Shape& normalized_shape, const Variable& weight0,
                     const Variable& bias0, double eps, std::optional<DType> y_dtype) {
  const Variable x = autocast::fp32(x0), weight = autocast::fp32(weight0), bias = autocast::fp32(bias0);
  auto out =
      kernels::layerNormForward(x.tensor(), normalized_shape, weight.tensor(), bias.tensor(), eps, y_dtype);
  return record<LayerNormBackward>(out.y, {&x, &weight, &bias}, x.tensor(), out.mean, out.variance,
                                   normalized_shape, weight.tensor(), bias.tensor(), eps);
}

}  // namespace

Variable layerNorm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                   const Variable& bias, double eps) {
  return layerNormTo(x, normalized_shape, weight, bias, eps, std::nullopt);
}

Variable layerNormLowered(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                          const Variable& bias, double eps) {
  const std::optional<DType> low = autocastDType();
  // Under autocast the normalisation computes in f32 (f64 stays f64, and its reader casts it).
  if (!low || x.dtype() == DType::f64)
    return autocast::lower(layerNorm(x, normalized_shape, weight, bias, eps));
  return layerNormTo(x, normalized_shape, weight, bias, eps, *low);
}

}  // namespace lockstep::autograd
