// linear and matmul of ops/linear.h.
#include "lockstep/autograd/ops/linear.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/kernels/linear.h"

namespace lockstep::autograd {

namespace {
class LinearBackward final : public Node {
 public:
  LinearBackward(Tensor x, Tensor weight) : x_(std::move(x)), weight_(std::move(weight)) {}
  std::vector<Tensor> apply(const Tensor& gy) override {
    // Only what some input needs: the first layer's input (data) usually wants no gradient.
    std::vector<Tensor> out(3);
    if (edges_[0]) out[0] = kernels::linearBackwardData(gy, weight_);
    if (edges_[1] || edges_[2]) {
      auto [gw, gb] = kernels::linearBackwardWeights(gy, x_, edges_[2] != nullptr);
      if (edges_[1]) out[1] = std::move(gw);
      out[2] = std::move(gb);
    }
    return out;
  }
  std::string name() const override { return "LinearBackward"; }
  void releaseSaved() override {
    x_ = Tensor();
    weight_ = Tensor();
  }

 private:
  Tensor x_, weight_;
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
