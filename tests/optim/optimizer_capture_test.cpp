// The host side of CUDA graph captures of an optimizer step (the replay itself:
// gpu_optimizer_capture_test.cpp): the scalars the update kernels read, computed once on the host
// for the CPU loops and the GPU kernels alike, and the capture calls' errors. Runs anywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "lockstep/kernels/optimizer.h"
#include "lockstep/optim.h"

using namespace lockstep;
using namespace lockstep::optim;
using autograd::Variable;

namespace {

TEST(OptimizerScalars, sgd_scalars_are_the_update_s_numbers_in_order) {
  const auto s = kernels::sgdScalars(
      {.lr = 0.25, .momentum = 0.9, .dampening = 0.125, .weight_decay = 1e-3, .first_step = true});
  EXPECT_EQ(s, (std::array<double, kernels::kSgdScalars>{1e-3, 0.9, 1.0 - 0.125, -0.25, 1.0}));
  EXPECT_EQ(kernels::sgdScalars({.first_step = false})[4], 0.0);
}

TEST(OptimizerScalars, adam_scalars_hold_the_bias_corrections_of_the_step) {
  const kernels::AdamParams p{
      .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .step = 7};
  const auto s = kernels::adamScalars(p);
  EXPECT_EQ(s[0], 0.9);
  EXPECT_EQ(s[1], 0.999);
  EXPECT_EQ(s[2], 1.0 - 0.9);
  EXPECT_EQ(s[3], 1.0 - 0.999);
  EXPECT_EQ(s[4], 0.01);
  EXPECT_EQ(s[5], 1.0 - 1e-3 * 0.01);
  EXPECT_EQ(s[6], std::sqrt(1.0 - std::pow(0.999, 7.0)));
  EXPECT_EQ(s[7], 1e-8);
  EXPECT_EQ(s[8], -(1e-3 / (1.0 - std::pow(0.9, 7.0))));
  // Another step, other corrections: what a graph must not bake in.
  kernels::AdamParams later = p;
  later.step = 8;
  EXPECT_NE(kernels::adamScalars(later)[8], s[8]);
  EXPECT_NE(kernels::adamScalars(later)[6], s[6]);
}

TEST(OptimizerScalars, write_scalars_fills_a_host_tensor_and_rejects_a_wrong_one) {
  Tensor t = Tensor::zeros({4}, DType::f64);
  const std::vector<double> v = {1.5, -2.0, 3.25};
  kernels::writeScalars(t, v);
  EXPECT_EQ(t.toVector<double>(), (std::vector<double>{1.5, -2.0, 3.25, 0.0}));
  EXPECT_THROW(kernels::writeScalars(Tensor::zeros({4}, DType::f32), v), ValueError);
  EXPECT_THROW(kernels::writeScalars(Tensor::zeros({2}, DType::f64), v), ValueError);
}

TEST(OptimizerCapture, a_parameter_s_first_step_cannot_be_captured) {
  // Its new state would be zero-filled by the graph at every replay.
  for (bool adam : {true, false}) {
    Variable p(Tensor::full({3}, 1.0, DType::f32), true);
    p.setGrad(Tensor::full({3}, 0.5, DType::f32));
    std::unique_ptr<Optimizer> opt;
    if (adam) {
      opt = std::make_unique<Adam>(std::vector<Variable>{p}, AdamOptions{});
    } else {
      opt = std::make_unique<SGD>(std::vector<Variable>{p}, SGDOptions{.lr = 0.1, .momentum = 0.9});
    }
    opt->beginCapture();
    try {
      opt->step();
      FAIL() << "a new state buffer was made in a capture";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("first gradient"), std::string::npos) << e.what();
    }
    opt->discardCapture();
  }
}

TEST(OptimizerCapture, a_captured_step_must_update_gpu_parameters) {
  Variable p(Tensor::full({3}, 1.0, DType::f32), true);
  p.setGrad(Tensor::full({3}, 0.5, DType::f32));
  Adam opt({p}, AdamOptions{});
  opt.step();  // the state exists: only the device is wrong
  opt.beginCapture();
  EXPECT_TRUE(opt.capturing());
  try {
    opt.step();
    FAIL() << "a host parameter's update was captured";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
  }
  opt.discardCapture();
  EXPECT_FALSE(opt.capturing());
  EXPECT_FALSE(opt.hasCapture());
}

TEST(OptimizerCapture, replays_and_captures_out_of_order_are_errors_that_say_so) {
  Variable p(Tensor::full({3}, 1.0, DType::f32), true);
  SGD opt({p}, SGDOptions{.lr = 0.1});
  EXPECT_THROW(opt.replayStep(), ValueError);
  EXPECT_THROW(opt.endCapture(), ValueError);
  opt.beginCapture();
  EXPECT_THROW(opt.beginCapture(), ValueError);
  EXPECT_THROW(opt.replayStep(), ValueError);  // not ended yet
  opt.endCapture();                            // nothing was stepped: nothing to replay
  EXPECT_FALSE(opt.hasCapture());
  // Eager steps after a capture that recorded nothing update as ever.
  p.setGrad(Tensor::full({3}, 2.0, DType::f32));
  opt.step();
  EXPECT_EQ(p.tensor().toVector<float>(), (std::vector<float>(3, 1.0f - 0.1f * 2.0f)));
}

}  // namespace
