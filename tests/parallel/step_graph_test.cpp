// Which training steps may be replayed as a CUDA graph: the blocker names what the host would decide
// differently from step to step, and StepGraph refuses such an engine. Runs anywhere (the replay
// itself: gpu_step_graph_test.cpp).
#include <gtest/gtest.h>

#include "lockstep/nn.h"
#include "lockstep/parallel.h"

using namespace lockstep;

namespace {

std::shared_ptr<nn::Module> mlp() {
  Generator g(1);
  nn::ModelOptions o;
  o.in_features = 4;
  o.out_features = 2;
  o.hidden = {3};
  o.generator = &g;
  return nn::makeModel("mlp", o);
}

parallel::EngineOptions sgd() {
  parallel::EngineOptions o;
  o.optimizer = {"SGD", {{"lr", 0.1}}};
  return o;
}

// A step on one GPU that a graph can replay.
parallel::StepGraphFacts replayable(const std::string& optimizer = "SGD") {
  parallel::StepGraphFacts f;
  f.model_on_gpu = true;
  f.built_with_cuda = true;
  f.optimizer = optimizer;
  return f;
}

bool mentions(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

TEST(StepGraph, a_model_on_the_cpu_is_not_captured_and_the_reason_is_given) {
  parallel::Engine engine(mlp(), sgd(), parallel::DistributedEnvironment{});
  EXPECT_EQ(parallel::stepGraphBlocker(engine), "the model is not on a GPU");
  try {
    parallel::StepGraph g(engine,
                          [](const Tensor& input, const Tensor&) { return autograd::Variable(input); });
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("not on a GPU"), std::string::npos) << e.what();
  }
}

TEST(StepGraph, sgd_adam_and_adamw_steps_on_one_gpu_are_replayable) {
  for (const char* name : {"SGD", "Adam", "AdamW"})
    EXPECT_EQ(parallel::stepGraphBlocker(replayable(name)), "") << name;
}

TEST(StepGraph, what_the_host_decides_each_step_blocks_the_replay_and_is_named) {
  auto f = replayable();
  f.model_on_gpu = false;
  EXPECT_TRUE(mentions(parallel::stepGraphBlocker(f), "not on a GPU"));
  f = replayable();
  f.built_with_cuda = false;
  EXPECT_TRUE(mentions(parallel::stepGraphBlocker(f), "without CUDA"));
  f = replayable();
  f.several_ranks = true;
  EXPECT_TRUE(mentions(parallel::stepGraphBlocker(f), "several ranks"));
  f = replayable();
  f.zero = true;
  EXPECT_TRUE(mentions(parallel::stepGraphBlocker(f), "ZeRO"));
  f = replayable();
  f.loss_scaler = true;
  EXPECT_TRUE(mentions(parallel::stepGraphBlocker(f), "loss scaler"));
  f = replayable();
  f.gradient_accumulation_steps = 2;
  EXPECT_TRUE(mentions(parallel::stepGraphBlocker(f), "accumulation"));
  const std::string other = parallel::stepGraphBlocker(replayable("Lamb"));
  EXPECT_TRUE(mentions(other, "Lamb") && mentions(other, "SGD")) << other;
}

TEST(StepGraph, the_facts_of_an_engine_are_its_options_and_parts) {
  parallel::EngineOptions o;
  o.optimizer = {"AdamW", {{"lr", 1e-3}}};
  o.scheduler = {"CosineAnnealingLR", {{"T_max", int64_t{10}}}};
  o.gradient_clipping = 1.0;
  o.gradient_accumulation_steps = 3;
  parallel::Engine engine(mlp(), o, parallel::DistributedEnvironment{});
  const parallel::StepGraphFacts f = parallel::stepGraphFacts(engine);
  EXPECT_FALSE(f.model_on_gpu);
  EXPECT_EQ(f.built_with_cuda, builtWithCuda());
  EXPECT_FALSE(f.several_ranks);
  EXPECT_FALSE(f.zero);
  EXPECT_FALSE(f.loss_scaler);
  EXPECT_EQ(f.gradient_accumulation_steps, 3);
  EXPECT_EQ(f.optimizer, "AdamW");
  // A schedule and clipping are replayed; on a GPU only the accumulation would block this engine.
  auto on_gpu = f;
  on_gpu.model_on_gpu = on_gpu.built_with_cuda = true;
  EXPECT_TRUE(mentions(parallel::stepGraphBlocker(on_gpu), "accumulation"));
  on_gpu.gradient_accumulation_steps = 1;
  EXPECT_EQ(parallel::stepGraphBlocker(on_gpu), "");
}

}  // namespace

// What StepGraph puts back when CUDA refuses a capture (the captured step's host side ran, its device
// work did not): after hostStepState(), a whole step, and restoreHostStepState(), the engine's
// counters (steps, the accumulation window), clipping's last norm, each parameter's gradient tensor,
// Adam's step counts (a parameter's state first made in between is forgotten), the groups' learning
// rates and the schedule's counter are as before. The
// tensors' values are the step's (on a GPU the failed capture never changed them).
TEST(StepGraph, host_step_state_puts_back_what_a_step_changed_on_the_host) {
  parallel::EngineOptions o;
  o.optimizer = {"Adam", {{"lr", 1e-2}}};
  o.scheduler = {"StepLR", {{"step_size", int64_t{1}}, {"gamma", 0.5}}};
  o.gradient_clipping = 1.0;
  parallel::Engine engine(mlp(), o, parallel::DistributedEnvironment{});
  std::vector<autograd::Variable> params = engine.model()->parameters();
  auto step = [&](float scale) {
    Tensor x = Tensor::full({5, 4}, scale);
    Tensor y = Tensor::fromVector<int64_t>({0, 1, 0, 1, 1}, {5});
    engine.backward(engine.forwardLoss(autograd::Variable(x), [&](const autograd::Variable& out) {
      return autograd::crossEntropy(out, y);
    }));
    engine.step();
  };
  step(0.5f);
  // A gradient held over (as after a forward and backward) and one parameter without Adam state yet.
  params[0].setGrad(Tensor::full(params[0].shape(), 0.25f));
  engine.optimizer()->restoreHostState([&] {
    optim::Optimizer::HostState h = engine.optimizer()->hostState();
    h.steps.erase(params[1].impl().get());
    return h;
  }());
  const parallel::Engine::HostStepState before = engine.hostStepState();
  const double lr = engine.optimizer()->paramGroups()[0].lr(), norm = engine.lastGradNorm();
  const int64_t counter = engine.scheduler()->counter();
  ASSERT_EQ(engine.globalSteps(), 1);
  step(1.5f);
  ASSERT_EQ(engine.globalSteps(), 2);
  ASSERT_NE(engine.optimizer()->paramGroups()[0].lr(), lr);
  ASSERT_NE(engine.lastGradNorm(), norm);
  ASSERT_EQ(engine.optimizer()->state(params[0]).step, 2);
  ASSERT_EQ(engine.optimizer()->state(params[1]).step, 1);  // made by the second step
  engine.restoreHostStepState(before);
  EXPECT_EQ(engine.globalSteps(), 1);
  EXPECT_EQ(engine.optimizer()->paramGroups()[0].lr(), lr);
  EXPECT_EQ(engine.lastGradNorm(), norm);
  EXPECT_EQ(engine.scheduler()->counter(), counter);
  EXPECT_EQ(engine.optimizer()->hostState().steps.count(params[1].impl().get()), 0u);
  EXPECT_EQ(engine.optimizer()->state(params[0]).step, 1);
  ASSERT_TRUE(params[0].hasGrad());
  EXPECT_EQ(params[0].grad().dataPtr(), before.grads[0].dataPtr());  // the same tensor, not a copy
  for (size_t i = 1; i < params.size(); ++i) EXPECT_FALSE(params[i].hasGrad()) << i;
  // The next step counts from there, as the step it replaces would have.
  step(1.5f);
  EXPECT_EQ(engine.globalSteps(), 2);
  EXPECT_EQ(engine.optimizer()->state(params[1]).step, 1);

  // A micro-step inside an accumulation window, put back: the window starts again.
  o.gradient_accumulation_steps = 2;
  parallel::Engine accumulating(mlp(), o, parallel::DistributedEnvironment{});
  const parallel::Engine::HostStepState window = accumulating.hostStepState();
  ASSERT_FALSE(accumulating.isGradientAccumulationBoundary());
  Tensor x = Tensor::full({5, 4}, 0.5f);
  Tensor y = Tensor::fromVector<int64_t>({0, 1, 0, 1, 1}, {5});
  accumulating.backward(accumulating.forwardLoss(
      autograd::Variable(x), [&](const autograd::Variable& out) { return autograd::crossEntropy(out, y); }));
  EXPECT_FALSE(accumulating.step());
  ASSERT_TRUE(accumulating.isGradientAccumulationBoundary());
  accumulating.restoreHostStepState(window);
  EXPECT_FALSE(accumulating.isGradientAccumulationBoundary());
  for (const autograd::Variable& p : accumulating.model()->parameters()) EXPECT_FALSE(p.hasGrad());
}
