// GradScaler: the loss-scaling API for loops of the user's own (torch's GradScaler over DeepSpeed's
// scaler): scale, unscale-and-check, skip on inf / nan, and the scale's update.
#include "lockstep/optim/grad_scaler.h"

#include <gtest/gtest.h>

#include <limits>

#include "lockstep/autograd.h"
#include "lockstep/optim/sgd.h"

using namespace lockstep;
using autograd::Variable;

TEST(GradScaler, scales_unscales_and_steps_with_finite_gradients) {
  Variable w(Tensor::fromVector<float>({1, 2, 3}, {3}), true);
  optim::SGD sgd({w}, {.lr = 0.5});
  optim::GradScaler scaler(optim::LossScalerOptions{.initial_scale_power = 4});  // 16
  Variable loss = autograd::sum(autograd::mul(w, w));
  Variable scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item(), 16.0 * loss.item());
  scaled.backward();
  EXPECT_EQ(w.grad().toVector<float>(), (std::vector<float>{32, 64, 96}));
  EXPECT_TRUE(scaler.step(sgd));
  // The optimizer saw the true gradient 2w: w - 0.5 * 2w = 0.
  EXPECT_EQ(w.tensor().toVector<float>(), (std::vector<float>{0, 0, 0}));
  scaler.update();
  EXPECT_EQ(scaler.skippedSteps(), 0);
  EXPECT_EQ(scaler.scaleValue(), 16.0);
}

TEST(GradScaler, skips_the_step_on_an_overflow_and_lowers_the_scale_after_the_hysteresis) {
  Variable w(Tensor::fromVector<float>({1, 2}, {2}), true);
  optim::SGD sgd({w}, {.lr = 0.5});
  optim::GradScaler scaler(optim::LossScalerOptions{.initial_scale_power = 4, .hysteresis = 2});
  for (int i = 0; i < 2; ++i) {
    w.zeroGrad();
    scaler.scale(autograd::sum(w)).backward();
    Tensor g = w.grad();
    g.data<float>()[1] = std::numeric_limits<float>::infinity();  // an overflow in the backward pass
    EXPECT_FALSE(scaler.step(sgd));
    EXPECT_EQ(w.tensor().toVector<float>(), (std::vector<float>{1, 2})) << "the skipped step changed nothing";
    scaler.update();
  }
  EXPECT_EQ(scaler.skippedSteps(), 2);
  EXPECT_EQ(scaler.scaleValue(), 8.0) << "the first overflow used up the hysteresis, the second halved";
}

TEST(GradScaler, update_without_a_step_is_an_error) {
  optim::GradScaler scaler;
  EXPECT_THROW(scaler.update(), ValueError);
}
