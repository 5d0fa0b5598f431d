// The activations of ops/activation.h: one node each, forward and backward in kernels/.
#include "lockstep/autograd/ops/activation.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/transformer.h"

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

struct GeluTanhBackward final : EltwiseBackward<GeluTanhBackward> {
  using EltwiseBackward::EltwiseBackward;
  static constexpr const char* kName = "GeluBackward";
  static Tensor grad(const Tensor& gy, const Tensor& x) { return kernels::geluTanhBackward(gy, x); }
};
struct SiluBackward final : EltwiseBackward<SiluBackward> {
  using EltwiseBackward::EltwiseBackward;
  static constexpr const char* kName = "SiluBackward";
  static Tensor grad(const Tensor& gy, const Tensor& x) { return kernels::siluBackward(gy, x); }
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

class SwigluBackward final : public Node {
 public:
  SwigluBackward(Tensor gate, Tensor up) : gate_(std::move(gate)), up_(std::move(up)) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    auto [gg, gu] = kernels::swigluBackward(g, gate_, up_);
    return {gg, gu};
  }
  std::string name() const override { return "SwigluBackward"; }
  void releaseSaved() override { gate_ = up_ = Tensor(); }

 private:
  Tensor gate_, up_;
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

Variable gelu(const Variable& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::none) return gelu(x);
  Tensor y = kernels::geluTanhForward(x.tensor());
  return record<GeluTanhBackward>(y, {&x}, x.tensor());
}

Variable silu(const Variable& x) {
  Tensor y = kernels::siluForward(x.tensor());
  return record<SiluBackward>(y, {&x}, x.tensor());
}

Variable swiglu(const Variable& gate0, const Variable& up0) {
  auto [gate, up] = autocast::promote(gate0, up0);
  Tensor y = kernels::swigluForward(gate.tensor(), up.tensor());
  return record<SwigluBackward>(y, {&gate, &up}, gate.tensor(), up.tensor());
}

}  // namespace lockstep::autograd
