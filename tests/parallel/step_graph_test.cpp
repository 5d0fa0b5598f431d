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
  o.scheduler = {"CosineAnnealingLR", {{"t_max", int64_t{10}}}};
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
