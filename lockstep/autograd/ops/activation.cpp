// relu (ops/activation.h) and leakyRelu/gelu/tanh/sigmoid (declared in ops/linear.h).
#include "lockstep/autograd/ops/activation.h"

#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/linear.h"
#include "lockstep/kernels/activation.h"

namespace lockstep::autograd {

namespace {
// One Backward node per activation: it saves the forward's output or input (whichever the
// derivative needs) and calls the matching kernel.
template <typename Derived>
class EltwiseBackward : public Node {
 public:
  explicit EltwiseBackward(Tensor saved) : saved_(std::move(saved)) {}
  std::vector<Tensor> apply(const Tensor& gy) override { return {Derived::grad(gy, saved_)}; }
  std::string name() const override { return Derived::kName; }
  void releaseSaved() override { saved_ = Tensor(); }

 private:
  Tensor saved_;
};

struct ReluBackward final : EltwiseBackward<ReluBackward> {
  using EltwiseBackward::EltwiseBackward;
  static constexpr const char* kName = "ReluBackward";
  static Tensor grad(const Tensor& gy, const Tensor& y) { return kernels::reluBackward(gy, y); }
};
struct GeluBackward final : EltwiseBackward<GeluBackward> {
  using EltwiseBackward::EltwiseBackward;
  static constexpr const char* kName = "GeluBackward";
  static Tensor grad(const Tensor& gy, const Tensor& x) { return kernels::geluBackward(gy, x); }
};
struct TanhBackward final : EltwiseBackward<TanhBackward> {
  using EltwiseBackward::EltwiseBackward;
  static constexpr const char* kName = "TanhBackward";
  static Tensor grad(const Tensor& gy, const Tensor& y) { return kernels::tanhBackward(gy, y); }
};
struct SigmoidBackward final : EltwiseBackward<SigmoidBackward> {
  using EltwiseBackward::EltwiseBackward;
  static constexpr const char* kName = "SigmoidBackward";
  static Tensor grad(const Tensor& gy, const Tensor& y) { return kernels::sigmoidBackward(gy, y); }
};

class LeakyReluBackward final : public Node {
 public:
  LeakyReluBackward(Tensor x, double slope) : x_(std::move(x)), slope_(slope) {}
  std::vector<Tensor> apply(const Tensor& gy) override {
    return {kernels::leakyReluBackward(gy, x_, slope_)};
  }
  std::string name() const override { return "LeakyReluBackward"; }
  void releaseSaved() override { x_ = Tensor(); }

 private:
  Tensor x_;
  double slope_;
};
}  // namespace

Variable relu(const Variable& x) {
  Tensor y = kernels::reluForward(x.tensor());
  return record<ReluBackward>(y, {&x}, y);
}

Variable leakyRelu(const Variable& x, double negative_slope) {
  Tensor y = kernels::leakyReluForward(x.tensor(), negative_slope);
  return record<LeakyReluBackward>(y, {&x}, x.tensor(), negative_slope);
}

Variable gelu(const Variable& x) {
  Tensor y = kernels::geluForward(x.tensor());
  return record<GeluBackward>(y, {&x}, x.tensor());
}

Variable tanh(const Variable& x) {
  Tensor y = kernels::tanhForward(x.tensor());
  return record<TanhBackward>(y, {&x}, y);
}

Variable sigmoid(const Variable& x) {
  Tensor y = kernels::sigmoidForward(x.tensor());
  return record<SigmoidBackward>(y, {&x}, y);
}

}  // namespace lockstep::autograd
