#include <gtest/gtest.h>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::randomTensor;

TEST(Relu, gradient) {
  // Keep inputs away from the kink at 0, where the finite difference is not the derivative.
  Tensor x = randomTensor({3, 4, 5}, DType::f64, 5);
  auto v = x.toVector<double>();
  for (auto& e : v) e = e >= 0 ? e + 0.1 : e - 0.1;
  EXPECT_TRUE(lockstep::testing::gradientsMatch([](const std::vector<Variable>& in) { return relu(in[0]); },
                                                {Tensor::fromVector<double>(v, {3, 4, 5})}));
}

TEST(Autograd, gradients_accumulate_across_backward_calls) {
  Variable x(Tensor::fromVector<double>({1.0, -2.0, 3.0}, {3}), true);
  for (int i = 0; i < 3; ++i) relu(x).backward(Tensor::ones({3}, DType::f64));
  EXPECT_EQ(x.grad().toVector<double>(), (std::vector<double>{3.0, 0.0, 3.0}));
  x.zeroGrad();
  EXPECT_FALSE(x.hasGrad());
}

TEST(Autograd, gradients_accumulate_over_two_uses_in_one_graph) {
  Variable x(Tensor::fromVector<double>({1.0, 2.0}, {2}), true);
  Variable y = relu(relu(x));
  Variable z = relu(x);
  // Route both through one output: y and z are both used by a node with two inputs.
  struct SumBackward : Node {
    std::vector<Tensor> apply(const Tensor& g) override { return {g, g}; }
    std::string name() const override { return "TestSum"; }
  };
  Tensor out = y.tensor().clone();
  kernels::addInto(out, z.tensor());
  Variable s = record<SumBackward>(out, {&y, &z});
  s.backward(Tensor::ones({2}, DType::f64));
  EXPECT_EQ(x.grad().toVector<double>(), (std::vector<double>{2.0, 2.0}));
}

TEST(Autograd, hooks_fire_once_per_leaf_during_backward) {
  Variable a(Tensor::fromVector<double>({1.0}, {1}), true);
  Variable b(Tensor::fromVector<double>({2.0}, {1}), true);
  std::vector<std::string> events;
  a.registerGradReadyHook([&](Variable& v) {
    EXPECT_TRUE(v.hasGrad());
    events.push_back("a");
  });
  b.registerGradReadyHook([&](Variable&) { events.push_back("b"); });
  // b is used twice; a once, deeper in the graph. b's hook must fire exactly once.
  struct Pair : Node {
    std::vector<std::string>* ev;
    explicit Pair(std::vector<std::string>* e) : ev(e) {}
    std::vector<Tensor> apply(const Tensor& g) override {
      ev->push_back("node");
      return {g, g};
    }
    std::string name() const override { return "TestPair"; }
  };
  Variable ra = relu(a);
  Variable p1 = record<Pair>(ra.tensor().clone(), {&ra, &b}, &events);
  Variable p2 = record<Pair>(p1.tensor().clone(), {&p1, &b}, &events);
  p2.backward(Tensor::ones({1}, DType::f64));
  ASSERT_EQ(std::count(events.begin(), events.end(), "a"), 1);
  ASSERT_EQ(std::count(events.begin(), events.end(), "b"), 1);
  // b is complete after both Pair nodes ran, a after relu: b's hook fires before a's, and both
  // fire before backward() returns (we are past it now, and events already holds them).
  EXPECT_EQ(events, (std::vector<std::string>{"node", "node", "b", "a"}));
  events.clear();
  relu(a).backward(Tensor::ones({1}, DType::f64));
  EXPECT_EQ(events, (std::vector<std::string>{"a"}));
}

TEST(Autograd, no_grad_guard_records_nothing) {
  Variable x(Tensor::fromVector<double>({1.0}, {1}), true);
  {
    NoGradGuard ng;
    Variable y = relu(x);
    EXPECT_FALSE(y.requiresGrad());
    EXPECT_EQ(y.gradFn(), nullptr);
  }
  EXPECT_TRUE(relu(x).requiresGrad());
}

TEST(Autograd, second_backward_through_freed_graph_is_an_error) {
  Variable x(Tensor::fromVector<double>({1.0}, {1}), true);
  Variable y = relu(relu(x));
  y.backward();
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
  Variable z = relu(relu(x));
  z.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_NO_THROW(z.backward());
}

TEST(Autograd, backward_needs_scalar_or_gradient) {
  Variable x(Tensor::fromVector<double>({1.0, 2.0}, {2}), true);
  EXPECT_THROW(relu(x).backward(), ValueError);
  Variable c(Tensor::fromVector<double>({1.0}, {1}));
  EXPECT_THROW(relu(c).backward(), ValueError);
}
