// linear and matmul of ops/linear.h.
#include "lockstep/autograd/ops/linear.h"

#include <optional>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/arith.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/fusions.h"
#include "lockstep/kernels/linear.h"

namespace lockstep::autograd {

namespace {
// The gradient of `residual + layer` (linearResidual, geluMlp with a residual): the residual's is the
// output's in its dtype (edge `at`, the last), the layer's the output's in the layer's compute dtype.
Tensor residualGradient(const Tensor& g, const Node& node, size_t at, DType residual) {
  if (!node.edges()[at]) return Tensor();
  return g.dtype() == residual ? g : g.to(residual);
}
Tensor layerGradient(const Tensor& g, DType layer) { return g.dtype() == layer ? g : g.to(layer); }

// linear's node, and linearResidual's (a fourth edge: the residual).
class LinearBackward final : public Node {
 public:
  LinearBackward(Tensor x, Tensor weight, std::optional<DType> residual = std::nullopt)
      : x_(std::move(x)), weight_(std::move(weight)), residual_(residual) {}
  std::vector<Tensor> apply(const Tensor& gy) override { return applyInto(gy, {}); }
  std::vector<Tensor> applyInto(const Tensor& g, const std::vector<Tensor*>& into) override {
    // Only what some input needs: the first layer's input (data) usually wants no gradient.
    std::vector<Tensor> out(residual_ ? 4 : 3);
    if (residual_) out[3] = residualGradient(g, *this, 3, *residual_);
    const Tensor gy = residual_ ? layerGradient(g, x_.dtype()) : g;
    Tensor* gx = held(into, 0);
    if (edges_[0] && !(gx && kernels::linearBackwardDataInto(*gx, gy, weight_)))
      out[0] = kernels::linearBackwardData(gy, weight_);
    if (edges_[1] || edges_[2]) {
      auto [gw, gb] = kernels::linearBackwardWeights(gy, x_, edges_[2] != nullptr);
      if (edges_[1]) out[1] = std::move(gw);
      out[2] = std::move(gb);
    }
    return out;
  }
  bool accumulates() const override { return true; }
  std::string name() const override { return "LinearBackward"; }
  void releaseSaved() override {
    x_ = Tensor();
    weight_ = Tensor();
  }

 private:
  Tensor x_, weight_;
  std::optional<DType> residual_;
};

// geluMlp's one node: proj's gradients, then fc's through the GELU (its bias gradient from the GEMM's
// epilogue where a GPU gave one, else with fc's weight gradient).
class GeluMlpBackward final : public Node {
 public:
  GeluMlpBackward(Tensor x, Tensor fc_weight, Tensor z, Tensor h, Tensor proj_weight,
                  std::optional<DType> residual)
      : x_(std::move(x)),
        w1_(std::move(fc_weight)),
        z_(std::move(z)),
        h_(std::move(h)),
        w2_(std::move(proj_weight)),
        residual_(residual) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    // Edges: x, fc weight, fc bias, proj weight, proj bias (, residual).
    std::vector<Tensor> out(residual_ ? 6 : 5);
    if (residual_) out[5] = residualGradient(g, *this, 5, *residual_);
    const Tensor gy = residual_ ? layerGradient(g, h_.dtype()) : g;
    if (edges_[3] || edges_[4]) {
      auto [gw, gb] = kernels::linearBackwardWeights(gy, h_, edges_[4] != nullptr);
      if (edges_[3]) out[3] = std::move(gw);
      if (edges_[4]) out[4] = std::move(gb);
    }
    if (!edges_[0] && !edges_[1] && !edges_[2]) return out;
    auto [gz, gb1] = kernels::linearBackwardDataGeluTanh(gy, w2_, z_, edges_[2] != nullptr);
    const bool bias_here = edges_[2] && !gb1.defined();
    if (edges_[1] || bias_here) {
      auto [gw, gb] = kernels::linearBackwardWeights(gz, x_, bias_here);
      if (edges_[1]) out[1] = std::move(gw);
      if (bias_here) gb1 = std::move(gb);
    }
    if (edges_[2]) out[2] = std::move(gb1);
    if (edges_[0]) out[0] = kernels::linearBackwardData(gz, w1_);
    return out;
  }
  std::string name() const override { return "GeluMlpBackward"; }
  void releaseSaved() override { x_ = w1_ = z_ = h_ = w2_ = Tensor(); }

 private:
  Tensor x_, w1_, z_, h_, w2_;
  std::optional<DType> residual_;
};

class MatmulBackward final : public Node {
 public:
  MatmulBackward(Tensor a, Tensor b) : a_(std::move(a)), b_(std::move(b)) {}
  std::vector<Tensor> apply(const Tensor& gy0) override {
    // Undo the 1-d promotion of the forward: gy gets back the M and N dims it lost.
    Tensor gy = gy0;
    if (b_.dim() == 1) gy = gy.unsqueeze(gy.dim());
    if (a_.dim() == 1) gy = gy.unsqueeze(gy.dim() - 1);
    auto [ga, gb] =
        kernels::matmulBackward(gy, promoteA(a_), promoteB(b_), edges_[0] != nullptr, edges_[1] != nullptr);
    if (ga.defined()) ga = ga.reshape(a_.shape());
    if (gb.defined()) gb = gb.reshape(b_.shape());
    return {ga, gb};
  }
  std::string name() const override { return "MatmulBackward"; }
  void releaseSaved() override {
    a_ = Tensor();
    b_ = Tensor();
  }

  // torch.matmul's rules for 1-d operands: a vector on the left is a row, on the right a column.
  static Tensor promoteA(const Tensor& a) { return a.dim() == 1 ? a.unsqueeze(0) : a; }
  static Tensor promoteB(const Tensor& b) { return b.dim() == 1 ? b.unsqueeze(1) : b; }

 private:
  Tensor a_, b_;
};
}  // namespace

Variable linear(const Variable& x0, const Variable& weight0, const Variable& bias0) {
  const Variable x = autocast::lower(x0), weight = autocast::lower(weight0), bias = autocast::lower(bias0);
  Tensor y = kernels::linearForward(x.tensor(), weight.tensor(), bias.defined() ? bias.tensor() : Tensor());
  return record<LinearBackward>(y, {&x, &weight, &bias}, x.tensor(), weight.tensor());
}

Variable linearResidual(const Variable& residual, const Variable& x0, const Variable& weight0,
                        const Variable& bias0) {
  if (!kernels::fusionEnabled(kernels::Fusion::residual_epilogue))
    return add(residual, linear(x0, weight0, bias0));
  const Variable x = autocast::lower(x0), weight = autocast::lower(weight0), bias = autocast::lower(bias0);
  Tensor y = kernels::linearResidualForward(x.tensor(), weight.tensor(),
                                            bias.defined() ? bias.tensor() : Tensor(), residual.tensor());
  return record<LinearBackward>(y, {&x, &weight, &bias, &residual}, x.tensor(), weight.tensor(),
                                residual.dtype());
}

Variable geluMlp(const Variable& x0, const Variable& fc_weight0, const Variable& fc_bias0,
                 const Variable& proj_weight0, const Variable& proj_bias0, const Variable& residual) {
  if (residual.defined() && !kernels::fusionEnabled(kernels::Fusion::residual_epilogue))
    return add(residual, geluMlp(x0, fc_weight0, fc_bias0, proj_weight0, proj_bias0));
  const Variable x = autocast::lower(x0), w1 = autocast::lower(fc_weight0), b1 = autocast::lower(fc_bias0),
                 w2 = autocast::lower(proj_weight0), b2 = autocast::lower(proj_bias0);
  auto [h, z] =
      kernels::linearGeluTanhForward(x.tensor(), w1.tensor(), b1.defined() ? b1.tensor() : Tensor());
  const Tensor b2t = b2.defined() ? b2.tensor() : Tensor();
  if (residual.defined()) {
    Tensor y = kernels::linearResidualForward(h, w2.tensor(), b2t, residual.tensor());
    return record<GeluMlpBackward>(y, {&x, &w1, &b1, &w2, &b2, &residual}, x.tensor(), w1.tensor(), z, h,
                                   w2.tensor(), residual.dtype());
  }
  Tensor y = kernels::linearForward(h, w2.tensor(), b2t);
  return record<GeluMlpBackward>(y, {&x, &w1, &b1, &w2, &b2}, x.tensor(), w1.tensor(), z, h, w2.tensor(),
                                 std::nullopt);
}

Variable matmul(const Variable& a0, const Variable& b0) {
  const Variable a = autocast::lower(a0), b = autocast::lower(b0);
  LOCKSTEP_ENFORCE(a.dim() >= 1 && b.dim() >= 1, ValueError, "matmul: operands need >= 1 dim, got ",
                   shapeToString(a.shape()), " and ", shapeToString(b.shape()));
  Tensor y = kernels::matmul(MatmulBackward::promoteA(a.tensor()), MatmulBackward::promoteB(b.tensor()));
  if (b.dim() == 1) y = y.squeeze(y.dim() - 1);
  if (a.dim() == 1) y = y.squeeze(y.dim() - (b.dim() == 1 ? 1 : 2));
  return record<MatmulBackward>(y, {&a, &b}, a.tensor(), b.tensor());
}

}  // namespace lockstep::autograd
