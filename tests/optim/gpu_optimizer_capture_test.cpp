// An optimizer step captured in a CUDA graph (Optimizer::beginCapture .. endCapture) and launched
// again after replayStep() updates bit for bit as eager steps do, with the learning rate changed
// before every step (as a schedule does) and Adam's bias corrections following the step count: a
// rate or step baked into the graph would part the two. The step counts of the state dict are the
// eager ones; a state dict cannot be loaded while a graph holds the step. Skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "common/gpu.h"
#include "lockstep/optim.h"
#include "lockstep/tensor.h"
#include "lockstep/tensor/cuda/graph.h"

using namespace lockstep;
using namespace lockstep::optim;
using autograd::Variable;

namespace {

const Device kGpu = Device::cuda(0);

Tensor seeded(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator(seed).uniform(t, -1.0, 1.0);
  return t.to(dtype);
}

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Variable>)>;

// Parameter i: shape and dtype (one f64, one of 200,000 elements: several blocks of a launch).
Shape shapeOf(size_t i) { return i == 2 ? Shape{200000} : Shape{static_cast<int64_t>(5 * i + 3)}; }
DType dtypeOf(size_t i) { return i == 4 ? DType::f64 : DType::f32; }

void expectCapturedStepsAreEager(const Make& make, const std::string& what) {
  constexpr size_t kParams = 6;
  std::vector<Variable> eager, graphed;
  for (size_t i = 0; i < kParams; ++i) {
    Tensor t = seeded(shapeOf(i), dtypeOf(i), 10 + i).to(kGpu);
    eager.emplace_back(t.clone(), true);
    graphed.emplace_back(t.clone(), true);
  }
  auto oe = make(eager), og = make(graphed);
  // The graph reads the gradients where the capture found them: refill those tensors in place.
  auto setGrads = [&](int step) {
    for (size_t i = 0; i < kParams; ++i) {
      Tensor g = seeded(shapeOf(i), dtypeOf(i), 1000 * static_cast<uint64_t>(step) + i).to(kGpu);
      eager[i].setGrad(g.clone());
      if (graphed[i].hasGrad()) {
        Tensor held = graphed[i].grad();
        held.copyFrom(g);
      } else {
        graphed[i].setGrad(g.clone());
      }
    }
  };
  auto setLr = [&](int step) {
    const double lr = 0.01 / (1.0 + step) + 1e-3 * step;  // a different rate every step
    oe->paramGroups()[0].setLr(lr);
    og->paramGroups()[0].setLr(lr);
  };
  cuda::Graph graph;
  for (int step = 0; step < 7; ++step) {
    setGrads(step);
    setLr(step);
    oe->step();
    if (step == 0) {
      og->step();  // eager: makes the state the capture then finds
    } else if (step == 1) {
      og->beginCapture();
      graph.capture(0, [&] { og->step(); });
      og->endCapture();
      graph.replay();
    } else {
      og->replayStep();
      graph.replay();
    }
  }
  for (size_t i = 0; i < kParams; ++i) {
    EXPECT_EQ(graphed[i].tensor().toVector<double>(), eager[i].tensor().toVector<double>())
        << what << " parameter " << i;
  }
  const OptimizerStateDict se = oe->stateDict(), sg = og->stateDict();
  EXPECT_EQ(sg.state.keys(), se.state.keys()) << what;
  for (const auto& key : se.state.keys()) {
    EXPECT_EQ(sg.state.at(key).toVector<double>(), se.state.at(key).toVector<double>()) << what << " " << key;
  }
  // Loading would leave the graph updating the old state tensors.
  EXPECT_THROW(og->loadStateDict(se), ValueError) << what;
  og->discardCapture();
  EXPECT_NO_THROW(og->loadStateDict(se)) << what;
}

TEST(GpuOptimizerCapture, a_captured_step_replays_as_the_eager_steps_with_a_new_rate_each_step) {
  LOCKSTEP_REQUIRE_GPU();
  expectCapturedStepsAreEager(
      [](std::vector<Variable> p) {
        return std::make_unique<SGD>(
            std::move(p), SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
      },
      "sgd nesterov");
  expectCapturedStepsAreEager(
      [](std::vector<Variable> p) {
        return std::make_unique<SGD>(std::move(p), SGDOptions{.lr = 0.1, .momentum = 0.5, .dampening = 0.1});
      },
      "sgd dampening");
  expectCapturedStepsAreEager(
      [](std::vector<Variable> p) {
        AdamOptions o;
        o.weight_decay = 0.01;
        o.amsgrad = true;
        return std::make_unique<Adam>(std::move(p), o);
      },
      "adam amsgrad");
  expectCapturedStepsAreEager([](std::vector<Variable> p) { return std::make_unique<AdamW>(std::move(p)); },
                              "adamw");
}

TEST(GpuOptimizerCapture, a_replay_refuses_a_changed_kernel_shape) {
  LOCKSTEP_REQUIRE_GPU();
  Variable p(seeded({10}, DType::f32, 1).to(kGpu), true);
  Adam opt({p}, AdamOptions{});
  p.setGrad(seeded({10}, DType::f32, 2).to(kGpu));
  opt.step();
  cuda::Graph graph;
  opt.beginCapture();
  graph.capture(0, [&] { opt.step(); });
  opt.endCapture();
  graph.replay();
  opt.paramGroups()[0].options["amsgrad"] = true;  // would need a buffer the graph never touches
  try {
    opt.replayStep();
    FAIL() << "a changed amsgrad was replayed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("amsgrad"), std::string::npos) << e.what();
  }
  EXPECT_THROW(opt.beginCapture(), ValueError);  // one capture at a time
}

}  // namespace
