// Which training steps may be replayed as a CUDA graph: the blocker names what would differ from
// step to step, and StepGraph refuses such an engine. Runs anywhere (the replay itself:
// gpu_step_graph_test.cpp).
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

TEST(StepGraph, a_model_on_the_cpu_is_not_captured_and_the_reason_is_given) {
  parallel::Engine engine(mlp(), sgd(), parallel::DistributedEnvironment{});
  EXPECT_EQ(parallel::stepGraphBlocker(engine), "the model is not on a GPU");
  try {
    parallel::StepGraph g(engine, [](const autograd::Variable& out, const Tensor&) { return out; });
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("not on a GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
