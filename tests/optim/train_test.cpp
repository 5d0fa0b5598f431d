// End to end: models from the zoo trained on synthetic tensors built here; the loss must fall.
#include <gtest/gtest.h>

#include "lockstep/autograd.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"

using namespace lockstep;
using autograd::Variable;

namespace {

// These problems are tiny: one intra-op thread avoids OpenMP barriers that dominate on a loaded
// machine (the kernels' own suites cover the threaded paths).
struct OneThread {
  int prev = kernels::numThreads();
  OneThread() { kernels::setNumThreads(1); }
  ~OneThread() { kernels::setNumThreads(prev); }
};
Tensor uniform(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape);
  Generator g(seed);
  g.uniform(t, lo, hi);
  return t;
}
}  // namespace

// linear 5 -> 2 on y = x A^T + c: SGD with momentum and a cosine schedule drives the MSE to ~0.
TEST(Train, linear_regression_with_sgd_converges) {
  OneThread one_thread;
  Generator init(1);
  auto model =
      nn::makeModel("linear", nn::ModelOptions{.in_features = 5, .out_features = 2, .generator = &init});
  Tensor x = uniform({64, 5}, 2);
  auto xv = x.toVector<float>();
  const float a[2][5] = {{0.5f, -1.0f, 2.0f, 0.0f, 1.5f}, {-0.7f, 0.3f, 0.0f, 1.0f, -2.0f}};
  std::vector<float> yv(128);
  for (int i = 0; i < 64; ++i) {
    for (int o = 0; o < 2; ++o) {
      float s = o == 0 ? 0.25f : -0.5f;
      for (int k = 0; k < 5; ++k) s += xv[static_cast<size_t>(i * 5 + k)] * a[o][k];
      yv[static_cast<size_t>(i * 2 + o)] = s;
    }
  }
  Tensor y = Tensor::fromVector<float>(yv, {64, 2});
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  optim::CosineAnnealingLR sched(opt, optim::CosineAnnealingLROptions{.t_max = 200, .eta_min = 0.01});
  nn::MSELoss mse;
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zeroGrad();
    Variable loss = mse(model->forward(Variable(x)), y);
    loss.backward();
    opt.step();
    sched.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  EXPECT_GT(first, 0.5);
  EXPECT_LT(last, 1e-3 * first);
}

// mlp on two-class data separated by a hyperplane: Adam + DeepSpeed warmup + clipping.
TEST(Train, mlp_classifier_with_adam_learns) {
  OneThread one_thread;
  Generator init(3);
  auto model = nn::makeModel(
      "mlp", nn::ModelOptions{.in_features = 10, .out_features = 2, .hidden = {16}, .generator = &init});
  Tensor x = uniform({128, 10}, 4);
  auto xv = x.toVector<float>();
  std::vector<int64_t> labels(128);
  for (int i = 0; i < 128; ++i) {
    float s = 0.1f;
    for (int k = 0; k < 10; ++k) s += xv[static_cast<size_t>(i * 10 + k)] * static_cast<float>((k % 3) - 1);
    labels[static_cast<size_t>(i)] = s > 0 ? 1 : 0;
  }
  Tensor target = Tensor::fromVector<int64_t>(labels, {128});
  optim::AdamW opt(model->parameters(), [] {
    optim::AdamWOptions o;
    o.lr = 0.02;
    return o;
  }());
  optim::WarmupDecayLROptions wo;
  wo.warmup_min_lr = 0.0;
  wo.warmup_max_lr = 0.02;
  wo.warmup_num_steps = 10;
  wo.warmup_type = optim::WarmupType::linear;
  wo.total_num_steps = 300;
  optim::WarmupDecayLR sched(opt, wo);
  nn::CrossEntropyLoss ce;
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    sched.step();  // DeepSpeed order: the first step applies iteration 0's lr
    opt.zeroGrad();
    Variable loss = ce(model->forward(Variable(x)), target);
    loss.backward();
    optim::clipGradNorm(model->parameters(), 5.0);
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  EXPECT_LT(last, 0.3 * first);
  autograd::NoGradGuard no_grad;
  auto logits = model->forward(Variable(x)).tensor().toVector<float>();
  int correct = 0;
  for (int i = 0; i < 128; ++i) {
    const int pred = logits[static_cast<size_t>(2 * i + 1)] > logits[static_cast<size_t>(2 * i)] ? 1 : 0;
    correct += pred == labels[static_cast<size_t>(i)];
  }
  EXPECT_GE(correct, 120);
}
