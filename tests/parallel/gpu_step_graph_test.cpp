// A training step replayed as a CUDA graph trains the model as the eager steps do: the seed CNN and
// ResNet-18 (batch norm) with SGD + momentum, and an epoch's smaller last batch runs eagerly in
// between. The blocker's reasons on the GPU. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include "common/gpu.h"
#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/parallel.h"

using namespace lockstep;

namespace {

std::shared_ptr<nn::Module> model(const std::string& name) {
  Generator g(7);
  nn::ModelOptions o;
  o.generator = &g;
  auto m = nn::makeModel(name, o);
  m->to(Device::cuda(0));
  return m;
}

parallel::EngineOptions sgd() {
  parallel::EngineOptions o;
  o.optimizer = {"SGD", {{"lr", 0.05}, {"momentum", 0.9}}};
  return o;
}

std::pair<Tensor, Tensor> batch(int step, int64_t rows, const Shape& item) {
  Shape s = {rows};
  s.insert(s.end(), item.begin(), item.end());
  Tensor x = Tensor::empty(s);
  Generator(100 + step).uniform(x, 0, 1);
  std::vector<int64_t> y(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) y[static_cast<size_t>(i)] = (i * 7 + step) % 10;
  return {x.to(Device::cuda(0)), Tensor::fromVector(y, {rows}).to(Device::cuda(0))};
}

autograd::Variable ce(const autograd::Variable& out, const Tensor& target) { return autograd::crossEntropy(out, target); }

void replaysTrainAsEagerSteps(const std::string& name, const Shape& item) {
  auto a = model(name), b = model(name);
  parallel::Engine eager(a, sgd(), parallel::DistributedEnvironment{});
  parallel::Engine graphed(b, sgd(), parallel::DistributedEnvironment{});
  ASSERT_EQ(parallel::stepGraphBlocker(graphed), "");
  parallel::StepGraph g(graphed, ce, /*warmup_steps=*/2);
  for (int step = 0; step < 8; ++step) {
    auto [x, y] = batch(step, step == 5 ? 5 : 16, item);  // step 5: a smaller batch, run eagerly
    autograd::Variable loss = ce(eager.forward(autograd::Variable(x)), y);
    eager.backward(loss);
    eager.step();
    Tensor lg = g.step(x, y);
    EXPECT_NEAR(lg.itemDouble(), loss.item(), 1e-5 * std::max(1.0, std::abs(loss.item()))) << name << " step " << step;
  }
  EXPECT_EQ(g.replays(), 8 - 2 - 1);
  EXPECT_EQ(graphed.globalSteps(), 8);
  auto pa = a->namedParameters(), pb = b->namedParameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_LT(lockstep::testing::closeness(pb[i].second.tensor(), pa[i].second.tensor(), 1e-6, 1e-5), 1.0)
        << name << " " << pa[i].first;
  }
}

TEST(GpuStepGraph, seed_cnn_replays_train_as_the_eager_steps_do) {
  LOCKSTEP_REQUIRE_GPU();
  replaysTrainAsEagerSteps("mnist_cnn", {1, 28, 28});
}

TEST(GpuStepGraph, resnet_with_batch_norm_replays_train_as_the_eager_steps_do) {
  LOCKSTEP_REQUIRE_GPU();
  replaysTrainAsEagerSteps("resnet18_cifar", {3, 32, 32});
}

TEST(GpuStepGraph, steps_that_differ_each_time_are_not_captured) {
  LOCKSTEP_REQUIRE_GPU();
  parallel::EngineOptions adam;
  adam.optimizer = {"Adam", {{"lr", 1e-3}}};
  parallel::Engine e1(model("mnist_cnn"), adam, parallel::DistributedEnvironment{});
  EXPECT_NE(parallel::stepGraphBlocker(e1).find("Adam"), std::string::npos);
  parallel::EngineOptions clip = sgd();
  clip.gradient_clipping = 1.0;
  parallel::Engine e2(model("mnist_cnn"), clip, parallel::DistributedEnvironment{});
  EXPECT_NE(parallel::stepGraphBlocker(e2).find("clipping"), std::string::npos);
}

}  // namespace
